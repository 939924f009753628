package inventory

import (
	"encoding/json"
	"strings"
	"testing"
)

// The comparison's own parts: a bug here would hide differences.

func TestAnsibleCompareSameValue(t *testing.T) {
	dec := func(s string) any {
		d := json.NewDecoder(strings.NewReader(string(pyJSONSpecials([]byte(s)))))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		return v
	}
	cases := []struct {
		a, b string
		same bool
	}{
		{`1`, `1`, true}, {`1`, `1.0`, true}, {`1e3`, `1000`, true}, {`1`, `"1"`, false},
		{`1`, `true`, false}, {`true`, `"yes"`, false}, {`0`, `false`, false}, {`null`, `""`, false},
		{`null`, `null`, true}, {`[1,2]`, `[1,2]`, true}, {`[1,2]`, `[2,1]`, false},
		{`{"a":1}`, `{"a":1.0}`, true}, {`{"a":1}`, `{"a":1,"b":2}`, false}, {`{"a":1}`, `{"b":1}`, false},
		{`Infinity`, `Infinity`, true}, {`Infinity`, `-Infinity`, false}, {`NaN`, `NaN`, true},
		{`Infinity`, `"Infinity"`, false}, {`12345678901234567890`, `12345678901234567891`, false},
	}
	for _, c := range cases {
		if got := sameValue(dec(c.a), dec(c.b)); got != c.same {
			t.Errorf("sameValue(%s, %s) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

func TestAnsibleCompareJSONSpecials(t *testing.T) {
	in := `{"a": Infinity, "b": "NaN Infinity \"Infinity\"", "c": [-Infinity, NaN]}`
	var v map[string]any
	if err := json.Unmarshal(pyJSONSpecials([]byte(in)), &v); err != nil {
		t.Fatal(err)
	}
	if v["b"] != `NaN Infinity "Infinity"` {
		t.Errorf("text inside a string changed: %q", v["b"])
	}
	if v["a"] == v["c"].([]any)[0] || v["a"] == "Infinity" {
		t.Errorf("Infinity and -Infinity must stay apart from each other and from the string: %v", v)
	}
}

func TestAnsibleCompareWarnings(t *testing.T) {
	stderr := "[WARNING]: Invalid characters were found in group names but not replaced, use\n-vvvv to see details\n" +
		"[WARNING]: Skipping unexpected key (hostz) in group (gpus), only \"vars\",\n\"children\" and \"hosts\" are valid\n"
	got := ansibleWarnings(stderr)
	if len(got) != 2 || !strings.HasSuffix(got[0], "use -vvvv to see details") || !strings.HasPrefix(got[1], "Skipping unexpected key (hostz)") {
		t.Errorf("ansibleWarnings = %q", got)
	}
}

func TestAnsibleCompareDiffMatch(t *testing.T) {
	d := &intendedDiff{input: "deepops*", what: "var:*:docker_install"}
	for _, c := range []struct {
		input, what string
		want        bool
	}{
		{"deepops-hosts", "var:gpu01:docker_install", true},
		{"deepops", "var:mgmt01:docker_install", true},
		{"deepops", "var:mgmt01:docker_install_x", false},
		{"kubespray", "var:gpu01:docker_install", false},
	} {
		if got := d.matches(c.input, c.what); got != c.want {
			t.Errorf("%s %s matches %s %s = %v", d.input, d.what, c.input, c.what, got)
		}
	}
	// A literal bracket needs its backslash; unescaped it is a class.
	lit := &intendedDiff{input: "subscripts", what: `pattern:gpus\[0\]`}
	if !lit.matches("subscripts", "pattern:gpus[0]") || lit.matches("subscripts", "pattern:gpus0") {
		t.Error("escaped brackets must match only the literal pattern")
	}
}

func TestAnsibleCompareCaseSource(t *testing.T) {
	cases := []struct {
		in, want string
		deb, bad bool
	}{
		{"ours/ssh-vars/hosts.ini", ansibleCompareDir + "/ours/ssh-vars/hosts.ini", false, false},
		{"deb:cisco/ucs/playbooks/inventory", debCollections + "/cisco/ucs/playbooks/inventory", true, false},
		{"deb:", "", true, true},
		{"deb:/etc/passwd", "", true, true},
		{"deb:../ansible/x", "", true, true},
		{"deb:a/../../x", "", true, true},
	}
	for _, c := range cases {
		got, deb, err := caseSource(c.in)
		if (err != nil) != c.bad || deb != c.deb || (!c.bad && got != c.want) {
			t.Errorf("caseSource(%q) = %q, %v, %v; want %q, deb %v, error %v", c.in, got, deb, err, c.want, c.deb, c.bad)
		}
	}
}
