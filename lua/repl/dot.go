package repl

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/lua"
	"github.com/gpush/gpush/modules"
	"github.com/gpush/gpush/termsafe"
)

// dot runs a dot command; it returns true to leave.
func (r *repl) dot(root context.Context, t string) bool {
	name, arg, _ := strings.Cut(t, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case ".exit":
		return true
	case ".help":
		// One text for --help and .help: the "Commands:" block of Help.
		_, cmds, _ := strings.Cut(Help, "Commands:\n")
		cmds, _, _ = strings.Cut(cmds, "\n\n")
		r.scr.line(termsafe.Block(cmds))
		r.scr.line(termsafe.Data("  An expression shows its value; Ctrl-C interrupts the evaluation."))
	case ".hosts":
		r.hosts()
	case ".all":
		r.limit, r.cur = "", r.all
	case ".limit":
		r.doLimit(arg)
	case ".check":
		r.check(arg)
	case ".doc":
		r.doc(arg)
	case ".reconnect":
		r.reconnect(root)
	default:
		r.errorf("unknown command %s (.help lists them)", name)
	}
	return false
}

func (r *repl) hosts() {
	r.scr.line(termsafe.Dataf("open: %s (%d), %d at once (--forks)", inventory.FoldNodeSet(r.all), len(r.all), r.fleet.Forks()))
	if len(r.cur) != len(r.all) || r.limit != "" {
		r.scr.line(termsafe.Dataf("selected: %s (%d) by .limit %s", inventory.FoldNodeSet(r.cur), len(r.cur), r.limit))
	}
	if len(r.left) > 0 {
		names := make([]string, len(r.left))
		for i, h := range r.left {
			names[i] = h.Host
		}
		r.scr.line(termsafe.Dataf("left out: %s (%d); .reconnect tries them again", inventory.FoldNodeSet(names), len(names)))
	}
	mode := "off"
	if r.fleet.Check() {
		mode = "on"
	}
	r.scr.line(termsafe.Dataf("check: %s", mode))
}

// selectOpen is the open hosts pattern selects, in fleet order.
func (r *repl) selectOpen(pattern string) ([]string, error) {
	sel, err := r.cfg.Inventory.Select(pattern)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, h := range sel {
		want[h.Name] = true
	}
	var cur []string
	for _, n := range r.all {
		if want[n] {
			cur = append(cur, n)
		}
	}
	return cur, nil
}

func (r *repl) doLimit(arg string) {
	if arg == "" {
		r.errorf(".limit: want a host pattern (groups, globs, node sets, !exclude, &intersect)")
		return
	}
	cur, err := r.selectOpen(arg)
	if err != nil {
		r.errorf(".limit %q: %v", arg, err)
		return
	}
	if len(cur) == 0 {
		r.errorf(".limit %q: matches no open host (open: %s)", arg, inventory.FoldNodeSet(r.all))
		return
	}
	r.limit, r.cur = arg, cur
}

func (r *repl) check(arg string) {
	switch arg {
	case "":
	case "on", "off":
		r.fleet.SetCheck(arg == "on")
	default:
		r.errorf(".check %q: want on or off", arg)
		return
	}
	if r.fleet.Check() {
		r.scr.line(termsafe.Data("check mode on: destructive calls say what they would do, and do nothing"))
	} else {
		r.scr.line(termsafe.Data("check mode off: calls act"))
	}
}

// doc prints a module's Doc, the text `gpush doc MODULE` prints; without a
// name, the list of modules.
func (r *repl) doc(name string) {
	if name == "" {
		r.scr.line(termsafe.Data("modules (.doc MODULE for one):"))
		for _, m := range modules.All() {
			r.scr.line(termsafe.Dataf("  %-10s %s", m.Name, m.Summary()))
		}
		return
	}
	m, ok := modules.Lookup(name)
	if !ok {
		r.errorf(".doc %q: no such module (modules: %s)", name, strings.Join(modules.Names(), ", "))
		return
	}
	if m.Doc == "" {
		r.errorf(".doc %s: the module has no documentation", name)
		return
	}
	for _, l := range strings.Split(strings.TrimRight(m.Doc, "\n"), "\n") {
		r.scr.line(termsafe.Block(l))
	}
}

// reconnect tries the hosts left out again (unreachable, lost, or
// abandoned stuck in a call): fresh sessions, so a host's globals are gone,
// in check mode if the fleet is.
func (r *repl) reconnect(root context.Context) {
	if len(r.left) == 0 {
		r.scr.line(termsafe.Data("no host is left out"))
		return
	}
	var hosts []inventory.Host
	var keep []lua.HostResult // a bad host var: reconnecting cannot help
	for _, h := range r.left {
		if r.badVars[h.Host] {
			keep = append(keep, h)
			continue
		}
		hosts = append(hosts, r.byName[h.Host])
	}
	if len(hosts) == 0 {
		r.errorf(".reconnect: the hosts left out failed to prepare, not to connect: fix the inventory and restart")
		return
	}
	ctx, cancel := r.track(root)
	prog := r.scr.progress(hostNames(hosts))
	still := r.fleet.Reconnect(ctx, hosts)
	prog.stop()
	r.untrack(cancel)
	r.noteBadVars(still)
	failed := map[string]bool{}
	for _, h := range still {
		failed[h.Host] = true
	}
	var back []string
	for _, h := range hosts {
		if !failed[h.Name] {
			back = append(back, h.Name)
		}
	}
	r.left = append(keep, still...)
	r.setOpen(r.fleet.Hosts())
	if len(back) > 0 {
		r.scr.line(r.scr.out.Paint("32", fmt.Sprintf("%s: reconnected (%d; new Lua states)", inventory.FoldNodeSet(back), len(back))))
	}
	r.showLeftOut(still, "")
}

func hostNames(hs []inventory.Host) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Name
	}
	return out
}
