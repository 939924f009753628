package jsoncheck

import "testing"

func TestValidate(t *testing.T) {
	s, err := Parse([]byte(`{
  "$defs": {"n": {"type": "integer"}},
  "type": "object",
  "required": ["a"],
  "additionalProperties": false,
  "properties": {
    "a": {"$ref": "#/$defs/n"},
    "b": {"type": ["string", "null"]},
    "c": {"type": "array", "items": {"enum": [1, "x"]}},
    "d": {"oneOf": [{"type": "string"}, {"const": 2}]},
    "e": {"type": "object", "additionalProperties": {"type": "boolean"}},
    "f": {"anyOf": [{"type": "number"}, {"type": "boolean"}]}
  }
}`))
	if err != nil {
		t.Fatal(err)
	}
	for doc, ok := range map[string]bool{
		`{"a": 1}`:                               true,
		`{"a": 1.5}`:                             false,
		`{}`:                                     false,
		`{"a": 1, "z": 0}`:                       false,
		`{"a": 1, "b": null, "c": [1, "x"]}`:     true,
		`{"a": 1, "c": [2]}`:                     false,
		`{"a": 1, "d": "s"}`:                     true,
		`{"a": 1, "d": 2}`:                       true,
		`{"a": 1, "d": 3}`:                       false,
		`{"a": 1, "e": {"x": true, "y": false}}`: true,
		`{"a": 1, "e": {"x": 1}}`:                false,
		`{"a": 1, "f": true}`:                    true,
		`{"a": 1, "f": "no"}`:                    false,
		`[]`:                                     false,
	} {
		if err := s.ValidateJSON([]byte(doc)); (err == nil) != ok {
			t.Errorf("%s: error %v, want ok=%v", doc, err, ok)
		}
	}
	for _, bad := range []string{`{"minimum": 1}`, `{"$ref": "#/definitions/x"}`, `{"$ref": "#/$defs/missing"}`, `{"properties": {"a": 1}}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s): no error", bad)
		}
	}
}
