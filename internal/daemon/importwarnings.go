package daemon

import (
	"context"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/importscan"
)

// ImportWarnings says what fn's module-level code does that its snapshots
// freeze: random numbers, the clock, connections taken at import
// (package importscan reads the code, never runs it). Nothing when the
// host cannot tell (no python3): a warning is advice, never a refusal.
func (s *Service) ImportWarnings(ctx context.Context, fn *catalog.Function) []string {
	found, err := importscan.Scan(ctx, filepath.Join(fn.CodeDir, fn.Name))
	if err != nil {
		s.log.Debug("module-level code not read", "function", fn.Name, "err", err)
		return nil
	}
	out := make([]string, 0, len(found))
	for _, f := range found {
		out = append(out, f.String())
	}
	if len(out) > 0 {
		s.log.Info("function's module-level code does what a snapshot freezes", "function", fn.Name, "warnings", len(out))
	}
	return out
}
