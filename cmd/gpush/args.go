package main

import (
	"strings"

	"github.com/urfave/cli/v2"
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
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
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
