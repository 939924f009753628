package remote

import (
	"context"
	"testing"

	"github.com/gpush/gpush/helper"
	"github.com/gpush/gpush/lab/sshd"
)

// BenchmarkRunLoopback is one command on an open connection: a channel
// open, exec and exit status over loopback.
func BenchmarkRunLoopback(b *testing.B) {
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR"})
	e := envFor(b, srv)
	c, err := Dial(context.Background(), e.host, e.opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if _, err := c.Run(context.Background(), []string{"true"}, RunOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWarmHelperCall is a new connection to a host that already has
// the helper, up to the first snapshot: what a warm run pays per host.
func BenchmarkWarmHelperCall(b *testing.B) {
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR"})
	e := envFor(b, srv)
	req := helper.SnapshotRequest{Config: helper.Config{DevDir: b.TempDir(), NvidiaSMI: "/nonexistent"}}
	for b.Loop() {
		c, err := Dial(context.Background(), e.host, e.opts)
		if err != nil {
			b.Fatal(err)
		}
		var snap helper.Snapshot
		if err := c.Helper(context.Background(), helper.VerbSnapshot, req, &snap); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
