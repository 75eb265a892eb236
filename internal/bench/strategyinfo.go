package bench

import (
	"slices"

	"github.com/thaw-dev/thaw/client"
)

// usesStore says whether strategy restores from the snapshot's copy in the
// memory store, as the daemon describes it (GET /v1/info): a run stores
// the snapshot first.
func usesStore(info *client.Info, strategy string) bool {
	i := slices.IndexFunc(info.StrategyDetails, func(d client.StrategyDetails) bool { return d.Kind == strategy })
	return i >= 0 && info.StrategyDetails[i].UsesStore
}

// StoreUsers are those of strategies that restore from the memory store.
func StoreUsers(info *client.Info, strategies []string) []string {
	var out []string
	for _, s := range strategies {
		if usesStore(info, s) {
			out = append(out, s)
		}
	}
	return out
}
