package main

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/lua"
)

// interspersed moves a subcommand's flags before its positional arguments,
// so that `gpush run free_gpus.lua -i ct129` works as it does for
// ansible-playbook: urfave/cli stops parsing flags at the first positional
// argument. Value-taking flags keep their value; "--" ends the flags.
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var cmd *cli.Command
	at := 1
	for ; at < len(args); at++ {
		if !strings.HasPrefix(args[at], "-") {
			cmd = app.Command(args[at])
			break
		}
	}
	if cmd == nil {
		return args
	}
	takesValue := valueFlags(cmd)
	var flags, pos []string
	rest := args[at+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if takesValue[name] && i+1 < len(rest) {
			i++
			flags = append(flags, rest[i])
		}
	}
	out := append(append([]string{}, args[:at+1]...), flags...)
	if len(pos) > 0 {
		out = append(append(out, "--"), pos...)
	}
	return out
}

// seconds is the value of every duration flag: a bare number is seconds,
// as in Lua's sleep(5) and a script's duration vars, so that --timeout 5
// is not read as 5ns or refused; a Go duration (1m30s, 500ms) works too.
type seconds time.Duration

func (s *seconds) Set(v string) error {
	d, err := parseSeconds(v)
	if err != nil {
		return err
	}
	*s = seconds(d)
	return nil
}

func (s *seconds) String() string {
	if s == nil {
		return "0s"
	}
	return time.Duration(*s).String()
}

// parseSeconds reads a duration flag's value; the error says what is accepted.
func parseSeconds(v string) (time.Duration, error) {
	t := strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > math.MaxInt64/float64(time.Second) {
			return 0, errors.New("want a number of seconds from 0 up, or a duration such as 1m30s or 500ms")
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 {
		return 0, errors.New("want a number of seconds (5, 0.5) or a duration such as 1m30s or 500ms")
	}
	return d, nil
}

// durationFlag is a flag whose value is read by parseSeconds; read it back
// with durationOf.
func durationFlag(name string, aliases []string, value time.Duration, usage string) *cli.GenericFlag {
	v := seconds(value)
	return &cli.GenericFlag{Name: name, Aliases: aliases, Value: &v, Usage: usage + " (seconds, or 1m30s)"}
}

// durationOf is the value of a flag made by durationFlag.
func durationOf(c *cli.Context, name string) time.Duration {
	if s, ok := c.Generic(name).(*seconds); ok && s != nil {
		return time.Duration(*s)
	}
	return 0
}

var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	badFlagValue  = regexp.MustCompile(`^(invalid value .* for flag )-+([A-Za-z0-9-]+):`)
)

// flagUsageError makes a command's flag parse error a usage error, with the
// nearest of its flags (read when the error comes: urfave/cli adds --help
// late) suggested for an unknown one. The help is not printed: the error
// would scroll out of sight above it.
func flagUsageError(name string, flags func() []cli.Flag) cli.OnUsageErrorFunc {
	help := "gpush help"
	if name != "" {
		help = "gpush " + name + " --help"
	}
	return func(_ *cli.Context, err error, _ bool) error {
		m := undefinedFlag.FindStringSubmatch(err.Error())
		if m == nil {
			// The flag package writes -timeout; gpush's help writes --timeout.
			msg := badFlagValue.ReplaceAllStringFunc(err.Error(), func(s string) string {
				p := badFlagValue.FindStringSubmatch(s)
				return p[1] + dashed(p[2]) + ":"
			})
			return usageError{errors.New(msg)}
		}
		var names []string
		for _, f := range flags() {
			names = append(names, f.Names()...)
		}
		if near := lua.Closest(m[1], names); near != "" {
			return usagef("%v; did you mean %s? (%s lists the flags)", err, dashed(near), help)
		}
		return usagef("%v (%s lists the flags)", err, help)
	}
}

// dashed writes a flag's name as it is typed: -f, --forks.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// scriptHelpFlag is run's hidden flag that `gpush run SCRIPT --help` turns
// into: urfave/cli would answer --help itself, with run's help.
const scriptHelpFlag = "script-help"

// scriptHelp rewrites `gpush run [flags] -- SCRIPT` with -h or --help among
// the flags (interspersed's output) to ask for SCRIPT's own help instead.
func scriptHelp(app *cli.App, args []string) []string {
	cmd := app.Command("run")
	if len(args) < 2 || args[1] != "run" || cmd == nil {
		return args
	}
	takesValue := valueFlags(cmd)
	out := append([]string{}, args[:2]...)
	asked := false
	for i := 2; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if !asked || i+1 >= len(args) {
				return args
			}
			return append(append(out, "--"+scriptHelpFlag), args[i:]...)
		case a == "-h" || a == "--help" || a == "-help":
			asked = true
			continue
		}
		out = append(out, a)
		if n := strings.TrimLeft(a, "-"); strings.HasPrefix(a, "-") && !strings.Contains(n, "=") && takesValue[n] && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return args
}

// valueFlags says, for each name of cmd's flags, whether it takes a value.
func valueFlags(cmd *cli.Command) map[string]bool {
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	return takesValue
}
