package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
)

// extraArg is one -e argument and the vars it gives.
type extraArg struct {
	arg  string
	vars map[string]any
}

// name is how errors quote the argument.
func (e extraArg) name() string {
	if strings.HasPrefix(e.arg, "@") {
		return "-e " + e.arg
	}
	return fmt.Sprintf("-e %q", e.arg)
}

// pairStart finds where each "key=" of a "k=v k2=v2" argument starts: a
// space begins a new pair only before a key, so "gpus=[0, 1]" is one pair.
var pairStart = regexp.MustCompile(`(?:^|\s+)([A-Za-z_][A-Za-z0-9_]*)=`)

// parseExtraArgs reads -e arguments as ansible-playbook does: "k=v" (v is
// a string; several space-separated pairs allowed), "@file.yaml" (a YAML or
// JSON mapping) or an inline YAML/JSON mapping "{...}".
// An @file over max bytes (0: the default cap) is refused unread.
func parseExtraArgs(args []string, max int64) ([]extraArg, error) {
	out := make([]extraArg, 0, len(args))
	for _, a := range args {
		e := extraArg{arg: a, vars: map[string]any{}}
		switch {
		case strings.HasPrefix(a, "@"):
			b, err := inventory.ReadInput(a[1:], max)
			if err != nil {
				return nil, usagef("%s: %w", e.name(), err)
			}
			if e.vars, err = yamlMapping(a[1:], b); err != nil {
				return nil, usagef("%s: %w", e.name(), err)
			}
		case strings.HasPrefix(strings.TrimSpace(a), "{"):
			var err error
			if e.vars, err = yamlMapping("-e value", []byte(a)); err != nil {
				return nil, usagef("%s: %w", e.name(), err)
			}
		default:
			s := strings.TrimSpace(a)
			starts := pairStart.FindAllStringSubmatchIndex(s, -1)
			if len(starts) == 0 || starts[0][0] != 0 {
				return nil, usagef("%s: want key=value, @file.yaml or a {...} mapping", e.name())
			}
			for i, m := range starts {
				end := len(s)
				if i+1 < len(starts) {
					end = starts[i+1][0]
				}
				e.vars[s[m[2]:m[3]]] = strings.TrimSpace(s[m[1]:end])
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// parseExtraVars merges -e arguments left to right (later wins), as given:
// what the REPL gets, with no script to check them against.
func parseExtraVars(args []string) (map[string]any, error) {
	parts, err := parseExtraArgs(args, 0)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, p := range parts {
		merge(out, p.vars)
	}
	return out, nil
}

// checkExtraVars checks each -e argument against the script's declared
// vars, so that the error names the argument, and merges the converted
// vars left to right.
func checkExtraVars(script string, decls lua.VarDecls, parts []extraArg) (map[string]any, error) {
	out := map[string]any{}
	for _, p := range parts {
		conv, err := lua.CheckExtraVars(script, decls, p.vars)
		if err != nil {
			return nil, usagef("%s: %w", p.name(), err)
		}
		merge(out, conv)
	}
	return out, nil
}

// yamlMapping reads an -e mapping; file names it in errors. The inventory
// package's reader refuses alias bombs and vault files as it does for
// inventories.
func yamlMapping(file string, b []byte) (map[string]any, error) {
	var m map[string]any
	if err := inventory.DecodeYAML(file, b, &m); err != nil {
		if errors.Is(err, inventory.ErrYAMLExpansion) || errors.Is(err, inventory.ErrVaultEncrypted) {
			return nil, err
		}
		return nil, fmt.Errorf("not a YAML/JSON mapping: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		dst[k] = v
	}
}
