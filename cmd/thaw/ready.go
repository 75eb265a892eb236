package main

import (
	"io"

	"github.com/thaw-dev/thaw/client"
)

// writeReadyNote writes whether a ready clone served an invocation, or why
// none did, as table rows (nothing when the daemon keeps no ready clones).
func writeReadyNote(w io.Writer, n *client.ReadyNote) {
	switch {
	case n == nil:
	case n.Hit:
		row(w, "ready clone", fmtMSCol(n.WaitedMS), "waited ready, restored ahead and never used")
		row(w, "  renewal", fmtMSCol(n.RenewMS), "clock, entropy, secrets, on_restore at dispatch")
	default:
		row(w, "ready clone", "none", n.Fallback)
	}
}
