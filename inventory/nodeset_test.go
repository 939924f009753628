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
		// ClusterShell's operators, one precedence, left to right.
		{"node[1-9]!node6", []string{"node1", "node2", "node3", "node4", "node5", "node7", "node8", "node9"}},
		{"node[1-9]&node[5-12]", []string{"node5", "node6", "node7", "node8", "node9"}},
		{"node[1-5]^node[4-7]", []string{"node1", "node2", "node3", "node6", "node7"}},
		{"node[1-3],node[2-5]!node2", []string{"node1", "node3", "node4", "node5"}},
		{"node[1-9]!node[2-3]&node[1-5]", []string{"node1", "node4", "node5"}},
		{"a,b!a,c", []string{"b", "c"}},
		{"a,b!a,a", []string{"b", "a"}},
		{"n[1-5] ! n3", []string{"n1", "n2", "n4", "n5"}},
		{"n1!n1", nil},
		{"n[1-2]&n[5-6]", nil},
		{"solo,", []string{"solo"}},
		// Digits touching a bracket count into its numbers, as nodeset reads them.
		{"n1[2-3]", []string{"n12", "n13"}},
		{"n[8-10]0", []string{"n80", "n90", "n100"}},
		{"n0[0-1]", []string{"n00", "n01"}},
		{"n[010-012]", []string{"n010", "n011", "n012"}},
		{"n[1- 3/ 2]", []string{"n1", "n3"}},
		{"n[1-2]-[3-4]", []string{"n1-3", "n1-4", "n2-3", "n2-4"}},
	}
	for _, tt := range tests {
		got, err := ExpandNodeSet(tt.in)
		if len(got) == 0 {
			got = nil
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ExpandNodeSet(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"gpu[]", "gpu[1-", "gpu[3-1]", "gpu[a-b]", "gpu[1-4/0]", "gpu]", "gpu[1-9999999]", "g[1-999]h[1-999]", "gpu[1--2]",
		"n[1-3]!", "!n1", "n1!!n2", "n1&", "^n1", "n1!,n2", // an operator needs two operands
		"n[01-100]", "n[1-010]", "n[008-10]", "n0[8-10]", // padding of unequal lengths
		"n[1/2]", "n[1-4/2]0", "n[1-2][3-4]", "n[1-2]0[3-4]", "n[1,,2]", "n[-1-2]", "n[+1-2]",
	} {
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
		{[]string{"rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"}, "rack[1-2]-gpu[1-2]"},
		// Several axes merge as nodeset -f merges them.
		{[]string{"node1-ib0", "node1-ib1", "node2-ib0", "node2-ib1", "node3-ib0"}, "node[1-2]-ib[0-1],node3-ib0"},
		{[]string{"a1b1", "a1b2", "a2b1"}, "a1b[1-2],a2b1"},
		{[]string{"a1b1", "a2b1", "a2b2"}, "a[1-2]b1,a2b2"},
		{[]string{"a1b1", "a1b2", "a1b3", "a2b1", "a3b1"}, "a1b[1-3],a[2-3]b1"},
		{[]string{"x1y3", "x2y3", "x3y4", "x1y4"}, "x1y[3-4],x2y3,x3y4"},
		{[]string{"a1b1c1", "a1b1c2", "a2b1c1", "a2b1c2", "a2b2c1"}, "a[1-2]b1c[1-2],a2b2c1"},
		// nodeset's number order (length, then text) and its padding runs.
		{[]string{"n9", "n10", "n010", "n0010", "n09"}, "n[9,09-10,010,0010]"},
		{[]string{"n8", "n9", "n10", "n11", "n08"}, "n[8-9,08,10-11]"},
		{[]string{"n08", "n99", "n100"}, "n[08,99,100]"},
		{[]string{"n07", "n08", "n99", "n100"}, "n[07-08,99-100]"},
		{[]string{"n1", "n3", "n5", "n6"}, "n[1,3,5-6]"},
		{[]string{"7", "007", "07"}, "[7,07,007]"},
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
