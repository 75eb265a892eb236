// Command thaw-cluster runs a thaw cluster on this host for demonstrations
// and experiments (make cluster-demo): thawd nodes in network namespaces
// behind HAProxy (internal/cluster, docs/cluster.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
