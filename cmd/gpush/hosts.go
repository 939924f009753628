package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/inventory"
	"github.com/gpush/gpush/termsafe"
)

func hostsCommand() *cli.Command {
	return &cli.Command{
		Name:  "hosts",
		Usage: "list the hosts an inventory and --limit select",
		Flags: append(inventoryFlags(),
			&cli.BoolFlag{Name: "graph", Usage: "groups as a tree (ansible-inventory --graph)"},
			&cli.BoolFlag{Name: "json", Usage: "groups and host vars as JSON (ansible-inventory --list)"},
		),
		Action: hostsRun,
	}
}

// loadInventory resolves -i, printing its warnings; errors name the
// argument. It returns the inventory, the --limit pattern ("all" when none)
// and the -i values as given.
func loadInventory(c *cli.Context) (*inventory.Inventory, string, string, error) {
	specs := c.StringSlice("inventory")
	spec := strings.Join(specs, " ")
	if spec == "" {
		return nil, "", "", usagef("--inventory (-i) is required (a file, inventory/NAME or \"host1,host2\")")
	}
	timeout := durationOf(c, "inventory-timeout")
	if timeout < 0 {
		return nil, "", "", usagef("--inventory-timeout %v: must not be negative", timeout)
	}
	max, err := maxInputSize(c)
	if err != nil {
		return nil, "", "", err
	}
	inv, err := inventory.ResolveAll(specs, inventory.Options{Script: inventory.ScriptOptions{Timeout: timeout}, MaxInputSize: max})
	if err != nil {
		return nil, "", "", usagef("--inventory %s: %w", spec, err)
	}
	// What Ansible only warns about (a typo'd "hostz:" drops its hosts) is
	// said, on stderr, before anything runs.
	for _, w := range inv.Warnings {
		fmt.Fprintf(c.App.ErrWriter, "gpush: warning: %s\n", termsafe.String(w))
	}
	pattern := c.String("limit")
	if pattern == "" {
		pattern = "all"
	}
	return inv, pattern, spec, nil
}

// selectHosts resolves -i and applies --limit for a run: every host
// selected must be reachable, and at least one selected.
func selectHosts(c *cli.Context) (*inventory.Inventory, []inventory.Host, error) {
	inv, pattern, spec, err := loadInventory(c)
	if err != nil {
		return nil, nil, err
	}
	hosts, err := inv.Select(pattern)
	if err != nil {
		return nil, nil, usagef("--limit %q: %w", pattern, err)
	}
	if len(hosts) == 0 {
		return nil, nil, usagef("--limit %q matches no host of inventory %s", pattern, spec)
	}
	return inv, hosts, nil
}

// listHosts is selectHosts for a listing: a host whose connection gpush
// cannot make is listed with its error (in errs), not a reason to list
// nothing, and an empty inventory lists nothing, as ansible-inventory does.
func listHosts(c *cli.Context) (*inventory.Inventory, []inventory.Host, map[string]error, error) {
	inv, pattern, _, err := loadInventory(c)
	if err != nil {
		return nil, nil, nil, err
	}
	names, err := inv.SelectNames(pattern)
	if err != nil {
		return nil, nil, nil, usagef("--limit %q: %w", pattern, err)
	}
	var hosts []inventory.Host
	errs := map[string]error{}
	for _, n := range names {
		h, ok := inv.Host(n)
		if !ok {
			// The implicit localhost: Select makes it.
			hs, err := inv.Select(n)
			if err != nil || len(hs) != 1 {
				errs[n] = err
				hosts = append(hosts, inventory.Host{Name: n})
				continue
			}
			h = hs[0]
		}
		if err := inv.HostErr(n); err != nil {
			errs[n] = err
		}
		hosts = append(hosts, h)
	}
	return inv, hosts, errs, nil
}

func hostsRun(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usagef("hosts: unexpected argument %q", c.Args().First())
	}
	if c.Bool("graph") && c.Bool("json") {
		return usagef("--graph and --json: pick one")
	}
	inv, hosts, errs, err := listHosts(c)
	if err != nil {
		return err
	}
	// Each host gpush could not reach is said on stderr, with why; the
	// listing still shows it (the table marks it).
	for _, h := range hosts {
		if e := errs[h.Name]; e != nil {
			fmt.Fprintf(termsafe.NewWriter(c.App.ErrWriter, false), "gpush: warning: host %s: cannot connect: %v\n", h.Name, e)
		}
	}
	// Inventory names and vars are shown sanitized; --json keeps them exact.
	w := termsafe.NewWriter(c.App.Writer, false)
	switch {
	case c.Bool("json"):
		b, err := inv.List(hosts)
		if err != nil {
			return fmt.Errorf("hosts --json: %w", err)
		}
		fmt.Fprintf(c.App.Writer, "%s\n", termsafe.JSON(b))
	case c.Bool("graph"):
		if err := inv.GraphHosts(w, hosts); err != nil {
			return fmt.Errorf("hosts --graph: %w", err)
		}
	default:
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HOST\tADDRESS\tUSER\tCONNECTION\tGROUPS")
		for _, h := range hosts {
			addr := h.Address
			if h.Port != 0 {
				// [fe80::1%eth0]:2222: the port cannot be read as part of an IPv6 address.
				addr = net.JoinHostPort(addr, strconv.Itoa(h.Port))
			}
			conn := h.Connection
			if e := errs[h.Name]; e != nil {
				conn = "error: " + e.Error()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.Name, addr, h.User, conn, strings.Join(h.Groups, ","))
		}
		tw.Flush()
		names := make([]string, len(hosts))
		for i, h := range hosts {
			names[i] = h.Name
		}
		fmt.Fprintf(w, "%d hosts: %s\n", len(hosts), inventory.FoldNodeSet(names))
	}
	return nil
}
