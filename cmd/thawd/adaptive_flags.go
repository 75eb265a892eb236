package main

import (
	"github.com/spf13/pflag"

	"github.com/thaw-dev/thaw/internal/daemon"
)

// adaptiveFlags adds the adaptive restore's settings to fs.
func adaptiveFlags(fs *pflag.FlagSet, a *daemon.AdaptiveConfig) {
	fs.StringVar(&a.DefaultStrategy, "default-strategy", "auto", "how cold starts that name no strategy restore, for functions that set none: auto (thaw chooses per function version and snapshot location from the function's own cold starts) or a strategy (then --remote-strategy still serves snapshots in the registry)")
	fs.StringVar(&a.DefaultRefresh, "default-refresh", "prepare", "when working sets recorded by reap, faasnap and snapbpf are recorded again after their cold starts drifted, for functions that set nothing: prepare (with the prepare's record input), traffic (with the invocation that showed the drift, used once) or off")
	fs.IntVar(&a.PrepareAfter, "auto-prepare-after", 5, "under auto, prepare a function version in the background after this many cold starts of a snapshot without strategy artifacts (negative: never)")
	fs.IntVar(&a.MaxBackground, "adaptive-background", daemon.DefaultMaxBackground, "background prepares and working-set refreshes the adaptive restore runs at once, daemon-wide (1-64); one more waits for a later cold start to ask again")
}
