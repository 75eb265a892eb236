package daemon

import (
	"os"
	"path/filepath"
)

// resultsDir holds the spill files of results being read from guests
// (agent.Conn.SpillTo). They have no names, so only a crash at the moment
// one is made leaves one behind; removeSpills clears those at start.
func (s *Service) resultsDir() string { return filepath.Join(s.cfg.DataDir, "results") }

// removeSpills deletes what an earlier daemon left in resultsDir.
func (s *Service) removeSpills() {
	ents, err := os.ReadDir(s.resultsDir())
	if err != nil {
		s.log.Error("clean results dir", "err", err)
		return
	}
	for _, e := range ents {
		p := filepath.Join(s.resultsDir(), e.Name())
		if err := os.RemoveAll(p); err != nil {
			s.log.Error("remove leftover", "path", p, "err", err)
			continue
		}
		s.log.Warn("removed a result spill file left by an earlier daemon", "path", p)
	}
}
