// Command gpush-helper is the host-side half of gpush: `gpush-helper <verb>`
// reads one JSON request on stdin and writes one JSON response on stdout.
// Build it static: CGO_ENABLED=0 go build -trimpath -ldflags='-s -w'.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpush/gpush/helper"
)

func main() {
	// An interrupted helper must still stop its nvidia-smi/systemctl children
	// and answer; the context carries the signal down to them.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := helper.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
