// Package jsoncheck validates JSON values against the subset of JSON Schema
// (draft 2020-12) that gpush's own schemas use (docs/json-schema.json):
// type (one or a list; "integer" is a number with no fractional part),
// properties, required, additionalProperties (false or a schema), items,
// enum, const, oneOf, anyOf, $ref to "#/$defs/NAME", and the annotations
// title, description, $schema, $id, $comment, examples. A keyword outside
// that subset is an error, so that a schema never says more than is checked.
package jsoncheck

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strings"
)

// Schema is a parsed schema document.
type Schema struct{ root map[string]any }

// Load reads a schema file.
func Load(path string) (*Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse reads a schema document and checks that it uses only the subset.
func Parse(b []byte) (*Schema, error) {
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	s := &Schema{root: root}
	if err := s.checkKeywords(root, "#"); err != nil {
		return nil, err
	}
	return s, nil
}

var known = map[string]bool{"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "oneOf": true, "anyOf": true, "$ref": true, "$defs": true,
	"title": true, "description": true, "$schema": true, "$id": true, "$comment": true, "examples": true}

func (s *Schema) checkKeywords(n map[string]any, at string) error {
	for k, v := range n {
		if !known[k] {
			return fmt.Errorf("schema %s: keyword %q is not checked by jsoncheck", at, k)
		}
		switch k {
		case "properties", "$defs":
			m, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("schema %s/%s: want an object", at, k)
			}
			for name, sub := range m {
				if err := s.checkSub(sub, at+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		case "items", "additionalProperties":
			if _, isBool := v.(bool); !isBool {
				if err := s.checkSub(v, at+"/"+k); err != nil {
					return err
				}
			}
		case "oneOf", "anyOf":
			l, ok := v.([]any)
			if !ok {
				return fmt.Errorf("schema %s/%s: want a list", at, k)
			}
			for i, sub := range l {
				if err := s.checkSub(sub, fmt.Sprintf("%s/%s/%d", at, k, i)); err != nil {
					return err
				}
			}
		case "$ref":
			if _, err := s.resolve(fmt.Sprint(v)); err != nil {
				return fmt.Errorf("schema %s: %w", at, err)
			}
		}
	}
	return nil
}

func (s *Schema) checkSub(v any, at string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("schema %s: want an object", at)
	}
	return s.checkKeywords(m, at)
}

func (s *Schema) resolve(ref string) (map[string]any, error) {
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		return nil, fmt.Errorf("$ref %q: only #/$defs/NAME is supported", ref)
	}
	defs, _ := s.root["$defs"].(map[string]any)
	d, ok := defs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q: no such definition", ref)
	}
	return d, nil
}

// ValidateJSON decodes one JSON text and validates it.
func (s *Schema) ValidateJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	return s.Validate(v)
}

// Validate checks a decoded JSON value (as encoding/json decodes into any).
func (s *Schema) Validate(v any) error { return s.validate(s.root, v, "$") }

func (s *Schema) validate(n map[string]any, v any, at string) error {
	if ref, ok := n["$ref"].(string); ok {
		d, err := s.resolve(ref)
		if err != nil {
			return err
		}
		if err := s.validate(d, v, at); err != nil {
			return err
		}
	}
	if t, ok := n["type"]; ok {
		if err := checkType(t, v, at); err != nil {
			return err
		}
	}
	if c, ok := n["const"]; ok && !reflect.DeepEqual(c, v) {
		return fmt.Errorf("%s: %v, want %v", at, show(v), show(c))
	}
	if e, ok := n["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || reflect.DeepEqual(x, v)
		}
		if !found {
			return fmt.Errorf("%s: %v is not one of %v", at, show(v), show(e))
		}
	}
	if l, ok := n["oneOf"].([]any); ok {
		var errs []string
		for _, sub := range l {
			if err := s.validate(sub.(map[string]any), v, at); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if pass := len(l) - len(errs); pass != 1 {
			return fmt.Errorf("%s: matches %d of oneOf's schemas, want 1 (%s)", at, pass, strings.Join(errs, "; "))
		}
	}
	if l, ok := n["anyOf"].([]any); ok {
		var errs []string
		for _, sub := range l {
			if err := s.validate(sub.(map[string]any), v, at); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) == len(l) {
			return fmt.Errorf("%s: matches none of anyOf's schemas (%s)", at, strings.Join(errs, "; "))
		}
	}
	if obj, ok := v.(map[string]any); ok {
		for _, r := range asList(n["required"]) {
			if _, ok := obj[fmt.Sprint(r)]; !ok {
				return fmt.Errorf("%s: %q is required", at, r)
			}
		}
		props, _ := n["properties"].(map[string]any)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := at + "." + k
			if p, ok := props[k].(map[string]any); ok {
				if err := s.validate(p, obj[k], sub); err != nil {
					return err
				}
				continue
			}
			switch ap := n["additionalProperties"].(type) {
			case bool:
				if !ap {
					return fmt.Errorf("%s: not in the schema", sub)
				}
			case map[string]any:
				if err := s.validate(ap, obj[k], sub); err != nil {
					return err
				}
			}
		}
	}
	if list, ok := v.([]any); ok {
		if items, ok := n["items"].(map[string]any); ok {
			for i, x := range list {
				if err := s.validate(items, x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func checkType(t, v any, at string) error {
	types := []string{}
	switch x := t.(type) {
	case string:
		types = append(types, x)
	case []any:
		for _, e := range x {
			types = append(types, fmt.Sprint(e))
		}
	}
	for _, ty := range types {
		if typeIs(ty, v) {
			return nil
		}
	}
	return fmt.Errorf("%s: %v is not of type %s", at, show(v), strings.Join(types, "|"))
}

func typeIs(t string, v any) bool {
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	}
	return false
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil || len(b) > 200 {
		return fmt.Sprintf("%.200v", v)
	}
	return string(b)
}
