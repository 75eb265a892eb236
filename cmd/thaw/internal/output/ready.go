package output

import (
	"io"

	"github.com/thaw-dev/thaw/client"
)

// WriteReadyNote writes whether a ready clone served an invocation, or why
// none did, as table rows (nothing when the daemon keeps no ready clones).
func WriteReadyNote(w io.Writer, n *client.ReadyNote) {
	switch {
	case n == nil:
	case n.Hit:
		Row(w, "ready clone", FmtMSCol(n.WaitedMS), "waited ready, restored ahead and never used")
		Row(w, "  renewal", FmtMSCol(n.RenewMS), "clock, entropy, secrets, on_restore at dispatch")
	default:
		Row(w, "ready clone", "none", n.Fallback)
	}
}
