package daemon

import (
	"github.com/thaw-dev/thaw/internal/daemon/config"
	"github.com/thaw-dev/thaw/internal/daemon/history"
)

// DefaultMaxStoredResult is how many result bytes an invocation's history
// keeps by default (package history).
const DefaultMaxStoredResult = history.DefaultMaxStoredResult

// hostAvailableMiB is the memory the host can give without swapping
// (MemAvailable).
func hostAvailableMiB() (int, bool) { return config.HostAvailableMiB() }
