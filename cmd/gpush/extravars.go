package main

import (
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// parseExtraVars merges -e arguments left to right, as ansible-playbook does:
// "k=v" (v is a string; several space-separated pairs allowed), "@file.yaml"
// (a YAML or JSON mapping) or an inline YAML/JSON mapping "{...}".
func parseExtraVars(args []string) (map[string]any, error) {
	out := map[string]any{}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "@"):
			path := a[1:]
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, usagef("-e %s: %w", a, err)
			}
			m, err := yamlMapping(b)
			if err != nil {
				return nil, usagef("-e %s: %w", a, err)
			}
			merge(out, m)
		case strings.HasPrefix(strings.TrimSpace(a), "{"):
			m, err := yamlMapping([]byte(a))
			if err != nil {
				return nil, usagef("-e %q: %w", a, err)
			}
			merge(out, m)
		default:
			for _, kv := range strings.Fields(a) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return nil, usagef("-e %q: want key=value, @file.yaml or a {...} mapping", a)
				}
				out[k] = v
			}
		}
	}
	return out, nil
}

func yamlMapping(b []byte) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
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
