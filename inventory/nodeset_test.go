package inventory

import (
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestExpandHostRange(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"gpu[01:03]", []string{"gpu01", "gpu02", "gpu03"}},
		{"gpu[1:3]", []string{"gpu1", "gpu2", "gpu3"}},
		{"gpu[8:10]", []string{"gpu8", "gpu9", "gpu10"}},
		{"n-[a:c]", []string{"n-a", "n-b", "n-c"}},
		{"n[y:B]", []string{"ny", "nz", "nA", "nB"}},
		{"w[0:20:5]", []string{"w0", "w5", "w10", "w15", "w20"}},
		{"w[:2]", []string{"w0", "w1", "w2"}},
		{"r[1:2]g[a:b]", []string{"r1ga", "r1gb", "r2ga", "r2gb"}},
		{"plain", []string{"plain"}},
		{"x[1:2].lab", []string{"x1.lab", "x2.lab"}},
	}
	for _, tt := range tests {
		got, err := ExpandHostRange(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ExpandHostRange(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"g[1]", "g[1:]", "g[01:2]", "g[3:1]", "g[1:3:0]", "g[1:3:-1]", "g[a:3]", "g[1:2", "g]1", "g[0:99999999]", "g[c:a]", "g[1:2:3:4]"} {
		if got, err := ExpandHostRange(bad); err == nil {
			t.Errorf("ExpandHostRange(%q) = %v, no error", bad, got)
		}
	}
}

func TestExpandNodeSet(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"gpu[01-03,07]", []string{"gpu01", "gpu02", "gpu03", "gpu07"}},
		{"gpu[1-10/3]", []string{"gpu1", "gpu4", "gpu7", "gpu10"}},
		{"gpu[08-10]", []string{"gpu08", "gpu09", "gpu10"}},
		{"rack[1-2]-gpu[1-2]", []string{"rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"}},
		{"gpu[01-02],login1, gpu01", []string{"gpu01", "gpu02", "login1"}},
		{"gpu[7,1]", []string{"gpu7", "gpu1"}},
		{"gpu[1,01]", []string{"gpu1", "gpu01"}},
		{"", nil},
	}
	for _, tt := range tests {
		got, err := ExpandNodeSet(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ExpandNodeSet(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"gpu[]", "gpu[1-", "gpu[3-1]", "gpu[a-b]", "gpu[1-4/0]", "gpu]", "gpu[1-9999999]", "g[1-999]h[1-999]", "gpu[1--2]"} {
		if got, err := ExpandNodeSet(bad); err == nil {
			t.Errorf("ExpandNodeSet(%q) = %v, no error", bad, got)
		}
	}
}

func TestFoldNodeSet(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"gpu01", "gpu02", "gpu03", "gpu07"}, "gpu[01-03,07]"},
		{[]string{"gpu07", "gpu03", "gpu01", "gpu02", "gpu02"}, "gpu[01-03,07]"},
		{[]string{"gpu08", "gpu09", "gpu10", "gpu11"}, "gpu[08-11]"},
		{[]string{"gpu9", "gpu10"}, "gpu[9-10]"},
		{[]string{"gpu1", "gpu01"}, "gpu[1,01]"},
		{[]string{"gpu01"}, "gpu01"},
		{[]string{"login", "gpu2", "gpu10", "gpu1"}, "gpu[1-2,10],login"},
		{[]string{"rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"}, "rack1-gpu[1-2],rack2-gpu[1-2]"},
		{[]string{"rack1-gpu1", "rack2-gpu1", "rack3-gpu1"}, "rack[1-3]-gpu1"},
		{[]string{"a.lab", "b.lab"}, "a.lab,b.lab"},
		{[]string{"n1.x", "n2.x", "n2.y"}, "n[1-2].x,n2.y"},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := FoldNodeSet(tt.in); got != tt.want {
			t.Errorf("FoldNodeSet(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNodeSetRoundTrip(t *testing.T) {
	var fleet []string
	for _, r := range []string{"gpu[01:16]", "node[8:12]", "ib[098:102]", "x[0:0]"} {
		names, err := ExpandHostRange(r)
		if err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, names...)
	}
	folded := FoldNodeSet(fleet)
	if folded != "gpu[01-16],ib[098-102],node[8-12],x0" {
		t.Errorf("fold = %q", folded)
	}
	back, err := ExpandNodeSet(folded)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(fleet)
	sort.Strings(back)
	if !reflect.DeepEqual(back, fleet) {
		t.Errorf("expand(fold(x)) = %v\nwant %v", back, fleet)
	}
	// In fold's own order, expand(fold(x)) == x exactly.
	ordered := []string{"gpu01", "gpu02", "gpu03", "gpu07", "gpu10"}
	if got, _ := ExpandNodeSet(FoldNodeSet(ordered)); strings.Join(got, ",") != strings.Join(ordered, ",") {
		t.Errorf("expand(fold(%v)) = %v", ordered, got)
	}
}
