package inventory

import (
	"fmt"
	"strings"
	"testing"
)

// An inventory larger than the bound on text expansion is still selected
// whole by all, a group or a glob: that bound is for names text expands
// to, and a pattern only selects hosts the inventory has.
func TestPatternLargerThanExpansionBound(t *testing.T) {
	old := maxExpand
	maxExpand = 10
	t.Cleanup(func() { maxExpand = old })
	var ini strings.Builder
	ini.WriteString("[gpu]\n")
	for i := range 25 {
		fmt.Fprintf(&ini, "gpu%02d\n", i)
	}
	inv, err := ParseINI("big.ini", []byte(ini.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, pat := range []string{"all", "gpu", "gpu*", "all:!gpu00", "~gpu.*"} {
		hosts, err := inv.Select(pat)
		if err != nil {
			t.Fatalf("%s: %v", pat, err)
		}
		want := 25
		if pat == "all:!gpu00" {
			want = 24
		}
		if len(hosts) != want {
			t.Errorf("%s: %d hosts, want %d", pat, len(hosts), want)
		}
	}
	// Text still expands within the bound, whatever the inventory's size.
	if _, err := inv.Select("gpu[00-24]"); err == nil || !strings.Contains(err.Error(), "more than 10 names") {
		t.Errorf("gpu[00-24] with a bound of 10: %v, want the expansion refused", err)
	}
}
