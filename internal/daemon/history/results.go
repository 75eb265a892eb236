package history

import (
	"os"
	"path/filepath"
)

// ResultsDir is the directory under dataDir that holds the spill files of
// results being read from guests (agent.Conn.SpillTo). They have no names,
// so only a crash at the moment one is made leaves one behind;
// RemoveSpills clears those at start.
func ResultsDir(dataDir string) string { return filepath.Join(dataDir, "results") }

// RemoveSpills deletes what an earlier daemon left in the results
// directory.
func (h *History) RemoveSpills() {
	dir := ResultsDir(h.cfg.DataDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		h.d.Log.Error("clean results dir", "err", err)
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			h.d.Log.Error("remove leftover", "path", p, "err", err)
			continue
		}
		h.d.Log.Warn("removed a result spill file left by an earlier daemon", "path", p)
	}
}
