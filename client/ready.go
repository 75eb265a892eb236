package client

import "github.com/thaw-dev/thaw/wire"

// ReadyNote says whether a ready clone served an invocation, or why none
// did (Timing.Ready).
type ReadyNote = wire.ReadyNote
