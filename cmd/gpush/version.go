package main

import (
	"crypto/sha256"
	"fmt"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/remote/helperbin"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:   "version",
		Usage:  "print gpush's version, the helper's, and the sha256 of the embedded helper builds",
		Action: versionRun,
	}
}

// version is stamped by `make build` (-X main.version=...); a plain
// `go build` falls back to the module's build info.
var version string

func versionRun(c *cli.Context) error {
	w := c.App.Writer
	v, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok && version == "" {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	if version != "" {
		v = version
	}
	fmt.Fprintf(w, "gpush %s", v)
	if rev != "" {
		fmt.Fprintf(w, " (%s)", rev)
	}
	fmt.Fprintf(w, "\nhelper %s\n", helper.Version)
	for _, arch := range helperbin.Arches {
		b, ok := helperbin.Embedded(arch)
		if !ok {
			fmt.Fprintf(w, "  %s: not embedded (built from source on first use; `make build` embeds it)\n", helperbin.FileName(arch))
			continue
		}
		fmt.Fprintf(w, "  %s: sha256 %x (%d bytes)\n", helperbin.FileName(arch), sha256.Sum256(b), len(b))
	}
	return nil
}
