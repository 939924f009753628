package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gpush/gpush/helper"
)

// The warm check: the serve session's own command checks, on the host,
// what deployHelper checks over SFTP (every folder of the helper's path,
// then the file and its sha256) and only then execs the helper. A warm
// host so costs one session per run. When anything is off, or a tool is
// missing, it prints one line "gpush-warm: <reason>" and exits 0 without
// running anything: the controller then deploys the Go way (probe, SFTP,
// upload, checks, with their error messages) and starts the helper again.
//
// The script is fixed text: every value from the inventory or the
// controller reaches it as a quoted positional argument. It must be as
// strict as checkHelperPath, checkPrivateDir, ancestorProblem and
// helperFileProblem: a planted file or a folder another user could change
// must never be run. Modes are read with stat -c %a (octal, with the
// sticky bit) and tested as numbers: 18 is 022 (group/world write), 2 is
// 002, 64 is 0100 (owner execute), 512 is 01000 (sticky).
//
// Verify once, then trust the same file. sha256sum of the 3 MiB helper
// was most of the check's CPU (25-30 ms per host per run on the bench).
// After a full match the check writes a stamp beside the helper,
// <name>.stamp: "dev inode size mtime ctime sha256" (GNU stat %d %i %s
// %.9Y %.9Z, nanoseconds; coreutils since 8.7, so Debian 12 and Ubuntu
// 24.04), through a temp name and a rename. A later check whose stat line
// of the file equals the stamp's, with the stamp a regular file of the
// login user, not group/other-writable, in the folder just checked, skips
// the hash. Anything else hashes again (and rewrites the stamp); a stat
// that does not print nanoseconds (busybox) never stamps.
//
// Why that is as safe as hashing every time: content only changes through
// write, truncate, a shared writable mapping or a new file, and the kernel
// sets ctime to the current time on each (a mapping: on the first write to
// a clean page; chmod, chown, link and rename too), while no system call
// sets ctime to a chosen value: utimensat (touch -d) restores mtime but
// moves ctime to now. A new file has another inode or a new ctime. Opening
// the file for writing (a mapping too, and so the one gap, more writes to
// an already dirty page) needs its owner, the login user, or root, since
// the check refuses group/other write. The rest needs root: setting the
// clock back to the recorded nanosecond, writing the block device or the
// file system image (group disk is root-equivalent), or an NFS server
// changed by hand. Root can as well replace the helper between the hash
// and the exec, and so can the login user, who owns the file and could
// fake sha256sum through its shell's PATH: hashing protects against
// neither. The trap is the clock's granularity (ctime comes from the
// kernel's coarse clock, a tick of a few ms): a write in the tick of the
// stamped ctime would keep it. So the temp stamp is created before the
// hash, and the stamp is written only when the file's stat line is
// unchanged after the hash and the temp's ctime is later than the file's:
// every write after the temp was created then has a later ctime than the
// stamped one.
//
// Few processes: on a 2-core bench each process a session starts costs
// about 1 ms of CPU, so a warm session does not start id, uname and one
// stat per folder from / down: one stat prints every folder, the
// helper and its stamp (GNU stat: one line per operand, in order); the
// lines are checked in the same order with the same words. When that stat
// fails (a path is missing, so it exits 1) or a line does not parse
// (busybox), the check stats path by path, so a refusal reads the same
// either way. The uid is the shell's effective uid from
// /proc/self/status (read by the shell itself), id -u where that is
// missing. uname -m stays: the kernel's arch file would ignore the login's
// personality (linux32) and differ from the cold path's probe.
const warmScript = `set -f
w() { [ -z "$tmp" ] || rm -f -- "$tmp"; printf 'gpush-warm: %s\n' "$*"; exit 0; }
d=$1 tok=$2 become=$3 tmp=
for t in uname id stat sha256sum; do command -v "$t" >/dev/null 2>&1 || w "no $t on the host"; done
uid=
if [ -r /proc/self/status ]; then
  while read -r pk pr pe px; do case $pk in Uid:) uid=$pe; break ;; esac; done </proc/self/status
fi
case $uid in ''|*[!0-9]*) uid=$(id -u) || w "id -u failed" ;; esac
mach=$(uname -m) || w "uname -m failed"
case $HOME in /*) ;; *) w "HOME is not an absolute path" ;; esac
printf 'gpush-probe: %s %s %s %s\n' "$tok" "$mach" "$uid" "$HOME"
case $mach in
x86_64|amd64) want=$4 size=$5 ;;
aarch64|arm64) want=$6 size=$7 ;;
*) w "architecture $mach not supported" ;;
esac
[ -n "$want" ] || w "no helper built for $mach"
case $d in
"~") d=$HOME ;;
"~/"*) d=$HOME/${d#??} ;;
/*) ;;
*) d=$HOME/$d ;;
esac
c=
IFS=/
for p in $d; do
  case $p in ''|.) ;; ..) c=${c%/*} ;; *) c=$c/$p ;; esac
done
unset IFS
st() {
  s=$(stat -c "$2" -- "$1" 2>/dev/null) || w "cannot stat $1"
  u=${s%% *}; s=${s#* }; m=${s%% *}; s=${s#* }
  case $u$m in ''|*[!0-9]*) w "stat $1 printed an unexpected line" ;; esac
  m=$((0$m))
}
dir() {
  st "$1" '%u %a %F'
  typ=$s
  dck "$1" "$2"
}
dck() {
  [ "$typ" = "symbolic link" ] && w "folder $1 is a symlink"
  [ "$typ" = directory ] || w "$1 is not a directory"
  if [ "$2" = up ]; then
    [ "$u" = 0 ] || [ "$u" = "$uid" ] || w "folder $1 is owned by uid $u"
    if [ $((m & 18)) -ne 0 ] && ! { [ $((m & 512)) -ne 0 ] && [ "$u" = 0 ] && [ $((m & 2)) -ne 0 ]; }; then
      w "folder $1 is group- or world-writable and not a sticky root folder"
    fi
  else
    [ "$u" = "$uid" ] || w "helper folder $1 is owned by uid $u"
    [ $((m & 18)) -eq 0 ] || w "helper folder $1 is group- or world-writable"
  fi
}
nl='
'
fmt='%u %a %s %d %i %.9Y %.9Z %F'
fields() {
  set -- $1
  [ $# -ge 8 ] || return 1
  u=$1 m=$2 sz=$3 dev=$4 ino=$5 mt=$6 ct=$7
  shift 7
  typ=$*
  case $u$m$sz$dev$ino in ''|*[!0-9]*) return 1 ;; esac
  for x in "$mt" "$ct"; do
    case $x in [0-9]*.[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) ;; *) return 1 ;; esac
    case ${x%.*} in *[!0-9]*) return 1 ;; esac
  done
  m=$((0$m))
}
newer() {
  [ "${1%.*}" -gt "${2%.*}" ] && return 0
  [ "${1%.*}" -eq "${2%.*}" ] && [ "1${1#*.}" -gt "1${2#*.}" ]
}
n=$want
[ ${#want} -le 32 ] || n=${want%"${want#????????????????????????????????}"}
n=gpush-helper-$n
f=$c/$n k=$c/$n.stamp
set -- /
cur= rest=${c#/}/
[ "$rest" = / ] && rest=
while [ -n "$rest" ]; do
  cur=$cur/${rest%%/*}; rest=${rest#*/}
  set -- "$@" "$cur"
done
nd=$#
lines() {
  rest=$all$nl
  while [ "$1" -gt 0 ]; do
    [ -n "$rest" ] && fields "${rest%%"$nl"*}" || return 1
    rest=${rest#*"$nl"}
    set -- $(($1 - 1))
  done
  [ -z "$rest" ]
}
id= kl= fl= fast=
if all=$(stat -c "$fmt" -- "$@" "$f" "$k" 2>/dev/null) && lines $((nd + 2)); then
  fast=1 kl=${all##*"$nl"}
elif all=$(stat -c "$fmt" -- "$@" "$f" 2>/dev/null) && lines $((nd + 1)); then
  fast=1
fi
i=0 rest=$all$nl
for p in "$@"; do
  i=$((i + 1)) a=up
  [ "$i" -lt "$nd" ] || a=last
  if [ -n "$fast" ]; then
    fields "${rest%%"$nl"*}"
    rest=${rest#*"$nl"}
    dck "$p" $a
  else
    dir "$p" $a
  fi
done
if [ -n "$fast" ]; then
  fl=${rest%%"$nl"*}
elif s=$(stat -c "$fmt" -- "$f" "$k" 2>/dev/null); then
  fl=${s%%"$nl"*} kl=${s#*"$nl"}
else
  fl=$(stat -c "$fmt" -- "$f" 2>/dev/null) || w "cannot stat $f"
fi
if fields "$fl"; then
  id="$dev $ino $sz $mt $ct"
else
  kl=
  st "$f" '%u %a %s %F'
  sz=${s%% *} typ=${s#* }
fi
[ "$typ" = "regular file" ] || w "$f is not a regular file"
[ "$u" = "$uid" ] || w "$f is owned by uid $u"
[ $((m & 18)) -eq 0 ] || w "$f is group- or world-writable"
[ $((m & 64)) -ne 0 ] || w "$f is not executable"
[ "$sz" = "$size" ] || w "$f has size $sz, want $size"
ok=
if [ -n "$id" ] && [ -n "$kl" ] && fields "$kl" && [ "$typ" = "regular file" ] &&
  [ "$u" = "$uid" ] && [ $((m & 18)) -eq 0 ] && [ "$sz" -le 512 ]; then
  IFS= read -r line <"$k" && [ "$line" = "$id $want" ] && ok=1
fi
if [ -z "$ok" ]; then
  if [ -n "$id" ]; then
    tmp=$c/.$n.stamp.gpush-tmp-$$
    set -C
    { true >"$tmp"; } 2>/dev/null || tmp=
    set +C
  fi
  h=$(sha256sum -- "$f" 2>/dev/null) || w "sha256sum $f failed"
  [ "${h%% *}" = "$want" ] || w "$f has sha256 ${h%% *}, want $want"
  if [ -n "$tmp" ]; then
    if s=$(stat -c "$fmt" -- "$f" "$tmp" 2>/dev/null) && [ "${s%%"$nl"*}" = "$fl" ] &&
      fields "${s#*"$nl"}" && newer "$ct" "${id##* }"; then
      printf '%s %s\n' "$id" "$want" >>"$tmp" && mv -fT -- "$tmp" "$k" 2>/dev/null && tmp=
    fi
    [ -z "$tmp" ] || rm -f -- "$tmp"
    tmp=
  fi
fi
printf 'gpush-warm-exec: %s\n' "$f"
if [ -n "$become" ]; then exec sudo -n -- "$f" serve "$tok"; fi
exec "$f" serve "$tok"`

// warmPrefix starts the line of a warm check that refused.
const warmPrefix = "gpush-warm: "

// warmProbePrefix starts the line that answers what the probe asks
// (token, uname -m, id -u, $HOME): a refused warm check saves the cold
// path the probe's session.
const warmProbePrefix = "gpush-probe: "

// parseWarmProbe reads a probe line of this session's token.
func parseWarmProbe(host, line, token string) (probeResult, bool) {
	rest, ok := strings.CutPrefix(line, warmProbePrefix+token+" ")
	if !ok {
		return probeResult{}, false
	}
	f := strings.SplitN(rest, " ", 3)
	if len(f) != 3 {
		return probeResult{}, false
	}
	pr, err := parseProbe(host, []byte(strings.Join(f, "\n")))
	return pr, err == nil
}

// warmExecPrefix starts the line naming the file it runs (for messages).
const warmExecPrefix = "gpush-warm-exec: "

// helperDigest is the sha256 and size of one architecture's helper.
type helperDigest struct {
	sum  string
	size int64
}

// helperDigests returns the digests for amd64 and arm64; an architecture
// the source cannot give is left out (the warm check then refuses it and
// the cold path reports the source's error).
func helperDigests(source func(goarch string) ([]byte, error)) map[string]helperDigest {
	if source == nil {
		return nil
	}
	out := map[string]helperDigest{}
	for _, arch := range []string{"amd64", "arm64"} {
		bin, err := source(arch)
		if err != nil {
			continue
		}
		out[arch] = helperDigest{sum: binSum(bin), size: int64(len(bin))}
	}
	return out
}

// warmDigestGrace is how long a warm check waits for the helper source of
// an architecture other than the controller's own. A source that builds
// the helper (helperbin without it embedded) took 16s for arm64 with a
// cold Go build cache on an idle 2-core machine and over 40s under CI
// load, inside the first helper call's deadline, for hosts that are not
// arm64 at all. A check without an architecture's digest refuses hosts of
// that architecture only; their cold path then waits for the source it
// needs, under its own step.
const warmDigestGrace = 2 * time.Second

// digestFunc gives one architecture's helper digest.
type digestFunc func(goarch string) (helperDigest, error)

// sourceDigest hashes what source gives.
func sourceDigest(source func(goarch string) ([]byte, error)) digestFunc {
	if source == nil {
		return nil
	}
	return func(goarch string) (helperDigest, error) {
		bin, err := source(goarch)
		if err != nil {
			return helperDigest{}, err
		}
		return helperDigest{sum: binSum(bin), size: int64(len(bin))}, nil
	}
}

// warmDigest is where a warm check gets its digests: o.HelperDigest when
// set (the binaries' bytes are then not needed unless a host is cold),
// else the hash of o.HelperSource's bytes.
func warmDigest(o Options) digestFunc {
	if o.HelperDigest == nil {
		return sourceDigest(o.HelperSource)
	}
	return func(goarch string) (helperDigest, error) {
		sum, size, err := o.HelperDigest(goarch)
		return helperDigest{sum: sum, size: size}, err
	}
}

// warmDigests is helperDigests for a warm check: each architecture's
// digest runs concurrently; the controller's own architecture (the one a
// test binary builds, and a lab build embeds) is waited for until ctx
// ends, any other for grace at most. One left out is named in late; its
// source finishes in the background (sources build once per process).
func warmDigests(ctx context.Context, digest digestFunc, grace time.Duration) (out map[string]helperDigest, late []string) {
	if digest == nil {
		return nil, nil
	}
	type res struct {
		arch string
		d    helperDigest
		ok   bool
	}
	arches := []string{"amd64", "arm64"}
	ch := make(chan res, len(arches))
	for _, arch := range arches {
		go func() {
			d, err := digest(arch)
			if err != nil {
				ch <- res{arch: arch}
				return
			}
			ch <- res{arch, d, true}
		}()
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	out = map[string]helperDigest{}
	answered := map[string]bool{}
	graceOver := false
wait:
	for len(answered) < len(arches) {
		if graceOver && (answered[runtime.GOARCH] || !slices.Contains(arches, runtime.GOARCH)) {
			break
		}
		select {
		case r := <-ch:
			answered[r.arch] = true
			if r.ok {
				out[r.arch] = r.d
			}
		case <-timer.C:
			graceOver = true
		case <-ctx.Done():
			break wait
		}
	}
	for _, arch := range arches {
		if !answered[arch] {
			late = append(late, arch)
		}
	}
	return out, late
}

// sumCache holds the sha256 of each helper binary seen, by the identity of
// its bytes: sources hand out one shared slice (helperbin reads each once),
// so 1000 hosts hash 3 MiB once, not 1000 times. The entry keeps its slice
// alive, so an address is never reused for other bytes while cached.
var sumCache sync.Map // sumKey -> sumEntry

type sumKey struct {
	p *byte
	n int
}

type sumEntry struct {
	bin []byte
	sum string
}

// binSum is the hex sha256 of bin, computed once per distinct slice.
func binSum(bin []byte) string {
	if len(bin) == 0 {
		s := sha256.Sum256(nil)
		return hex.EncodeToString(s[:])
	}
	k := sumKey{unsafe.SliceData(bin), len(bin)}
	if v, ok := sumCache.Load(k); ok {
		return v.(sumEntry).sum
	}
	s := sha256.Sum256(bin)
	e := sumEntry{bin: bin, sum: hex.EncodeToString(s[:])}
	v, _ := sumCache.LoadOrStore(k, e)
	return v.(sumEntry).sum
}

// warmCommand is the serve session's command line for a host: the fixed
// script with its arguments, all quoted.
func warmCommand(dir, token string, become bool, digests map[string]helperDigest) string {
	return "set -- " + ShellJoin(warmArgs(dir, token, become, digests)) + "\n" + warmScript
}

// warmArgv is the warm check as an argument vector, for transports that
// start an argv without a login shell: sh -c SCRIPT sh ARGS...
func warmArgv(dir, token string, become bool, digests map[string]helperDigest) []string {
	return append([]string{"sh", "-c", warmScript, "sh"}, warmArgs(dir, token, become, digests)...)
}

// warmArgs are the warm script's positional arguments.
func warmArgs(dir, token string, become bool, digests map[string]helperDigest) []string {
	b := ""
	if become {
		b = "1"
	}
	args := []string{dir, token, b}
	for _, arch := range []string{"amd64", "arm64"} {
		d := digests[arch]
		size := ""
		if d.sum != "" {
			size = strconv.FormatInt(d.size, 10)
		}
		args = append(args, d.sum, size)
	}
	return args
}

// serveArgv is how the cold path runs a helper it has just checked.
func serveArgv(p, token string, become bool) []string {
	argv := []string{p, helper.VerbServe, token}
	if become {
		argv = sudoArgv(argv)
	}
	return argv
}

// warmReason returns the reason of a refusal line, if line is one.
func warmReason(line string) (string, bool) {
	if r, ok := strings.CutPrefix(line, warmPrefix); ok {
		return r, true
	}
	return "", false
}
