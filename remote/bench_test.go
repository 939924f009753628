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

// BenchmarkHelperContentCheck is what checking the deployed helper's
// content costs per connection: the host's sha256sum, or reading the file
// back over SFTP (hosts without sha256sum).
func BenchmarkHelperContentCheck(b *testing.B) {
	srv := sshd.StartT(b, sshd.Options{LogLevel: "ERROR"})
	e := envFor(b, srv)
	c, err := Dial(context.Background(), e.host, e.opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sc := c.(*sshConn)
	p, err := sc.DeployHelper(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	s, err := sc.sftpClient(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	fi, err := sftpFS{s}.Lstat(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("sha256sum", func(b *testing.B) {
		for b.Loop() {
			if _, err := sc.hostSum(context.Background(), p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sftp-read-back", func(b *testing.B) {
		b.SetBytes(fi.size)
		for b.Loop() {
			if _, err := readBackSum(context.Background(), sftpFS{s}, p, fi.size); err != nil {
				b.Fatal(err)
			}
		}
	})
}
