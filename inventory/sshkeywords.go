package inventory

import (
	"fmt"
	"runtime"
	"strings"
)

// sshKeywords are the keywords OpenSSH 9.2's ssh (Debian's build, with its
// GSSAPI key exchange patch) accepts in ssh_config, deprecated and
// unsupported ones included (ssh only warns about those). Found by giving
// `ssh -G` each candidate keyword in a block that does not apply: every
// other word is "Bad configuration option" and refuses the whole
// configuration, for every host.
var sshKeywords = wordSet(`
addkeystoagent addressfamily afstokenpassing batchmode bindaddress bindinterface
canonicaldomains canonicalizefallbacklocal canonicalizehostname canonicalizemaxdots
canonicalizepermittedcnames casignaturealgorithms certificatefile
challengeresponseauthentication checkhostip cipher ciphers clearallforwardings
compression compressionlevel connectionattempts connecttimeout controlmaster
controlpath controlpersist dsaauthentication dynamicforward enableescapecommandline
enablesshkeysign escapechar exitonforwardfailure fallbacktorsh fingerprinthash
forkafterauthentication forwardagent forwardx11 forwardx11timeout forwardx11trusted
gatewayports globalknownhostsfile globalknownhostsfile2 gssapiauthentication
gssapiclientidentity gssapidelegatecredentials gssapikexalgorithms gssapikeyexchange
gssapirenewalforcesrekey gssapiserveridentity gssapitrustdns hashknownhosts host
hostbasedacceptedalgorithms hostbasedauthentication hostbasedkeytypes
hostkeyalgorithms hostkeyalias hostname identitiesonly identityagent identityfile
identityfile2 ignoreunknown include ipqos kbdinteractiveauthentication
kbdinteractivedevices keepalive kerberosauthentication kerberostgtpassing
kexalgorithms knownhostscommand localcommand localforward loglevel logverbose macs
match nohostauthenticationforlocalhost numberofpasswordprompts
passwordauthentication permitlocalcommand permitremoteopen pkcs11provider port
preferredauthentications protocol protocolkeepalives proxycommand proxyjump
proxyusefdpass pubkeyacceptedalgorithms pubkeyacceptedkeytypes pubkeyauthentication
rekeylimit remotecommand remoteforward requesttty requiredrsasize revokedhostkeys
rhostsauthentication rhostsrsaauthentication rsaauthentication securitykeyprovider
sendenv serveralivecountmax serveraliveinterval sessiontype setenv setuptimeout
skeyauthentication smartcarddevice stdinnull streamlocalbindmask
streamlocalbindunlink stricthostkeychecking syslogfacility tcpkeepalive
tisauthentication tunnel tunneldevice updatehostkeys useblacklistedkeys
useprivilegedport user userknownhostsfile userknownhostsfile2 useroaming usersh
verifyhostkeydns visualhostkey xauthlocation
`)

func init() {
	if runtime.GOOS == "darwin" {
		// Apple's ssh knows it; where gpush runs, ssh is Apple's.
		sshKeywords["usekeychain"] = true
	}
}

func wordSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// unknownKeyword is ssh's verdict on a line whose keyword it does not
// know: an error for the whole configuration, wherever the line is
// (a block that does not apply, a file included from one), unless the
// IgnoreUnknown obtained so far names it (a pattern list, compared
// case-insensitively, as readconf.c does).
func (e *sshEval) unknownKeyword(l *sshLine) error {
	if e.o.ignoreUnknown != "" && matchPatternList(l.key, strings.ToLower(e.o.ignoreUnknown), true) == 1 {
		return nil
	}
	return fmt.Errorf("ssh config %s: Bad configuration option: %s (ssh refuses the whole configuration for it, for every host; an IgnoreUnknown line before it lets it pass)", l.pos(), l.key)
}
