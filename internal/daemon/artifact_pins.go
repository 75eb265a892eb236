package daemon

import (
	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
	"github.com/thaw-dev/thaw/internal/restore"
)

// artifactPins keep a snapshot's strategy artifacts from being swapped
// while a restore resolves them (snapshots.Pins).
type artifactPins struct{ *snapshots.Pins }

// begin wraps a strategy's begin so the session holds its snapshot's pin
// until Started or Close (snapshots.Pins.Begin).
func (p artifactPins) begin(begin restore.BeginFunc) restore.BeginFunc { return p.Begin(begin) }
