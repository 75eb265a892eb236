// Command thawd is thaw's daemon: it runs functions in microVMs, snapshots
// them and restores them, behind a REST API (internal/api/openapi.json), on a Unix socket
// and, with a token, on TCP (serve.go). Its settings come from flags, the
// environment and a config file (config.go, command.go).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := newCommand(os.Stdout, os.Stderr, os.LookupEnv).execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
