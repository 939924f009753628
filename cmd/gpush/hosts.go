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

// selectHosts resolves -i and applies --limit; errors name the argument.
func selectHosts(c *cli.Context) (*inventory.Inventory, []inventory.Host, error) {
	specs := c.StringSlice("inventory")
	spec := strings.Join(specs, " ")
	if spec == "" {
		return nil, nil, usagef("--inventory (-i) is required (a file, inventory/NAME or \"host1,host2\")")
	}
	timeout := durationOf(c, "inventory-timeout")
	if timeout < 0 {
		return nil, nil, usagef("--inventory-timeout %v: must not be negative", timeout)
	}
	inv, err := inventory.ResolveAll(specs, inventory.Options{Script: inventory.ScriptOptions{Timeout: timeout}})
	if err != nil {
		return nil, nil, usagef("--inventory %s: %w", spec, err)
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
	hosts, err := inv.Select(pattern)
	if err != nil {
		return nil, nil, usagef("--limit %q: %w", pattern, err)
	}
	if len(hosts) == 0 {
		return nil, nil, usagef("--limit %q matches no host of inventory %s", pattern, spec)
	}
	return inv, hosts, nil
}

func hostsRun(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usagef("hosts: unexpected argument %q", c.Args().First())
	}
	if c.Bool("graph") && c.Bool("json") {
		return usagef("--graph and --json: pick one")
	}
	inv, hosts, err := selectHosts(c)
	if err != nil {
		return err
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", h.Name, addr, h.User, h.Connection, strings.Join(h.Groups, ","))
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
