package daemon

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// Results just over the history's limit, cut inside a multi-byte
// character or not, keep a valid prefix of at most the limit.
func TestHistoryPrefixAtTheLimit(t *testing.T) {
	const limit = 1024
	for n := limit - 1; n <= limit+6; n++ {
		res := json.RawMessage(`"` + strings.Repeat("é", n) + `"`)[:n]
		h := forHistory(&Invocation{Result: res}, limit)
		if n <= limit {
			if string(h.Result) != string(res) || h.ResultTruncated {
				t.Errorf("%d bytes: cut though within the limit", n)
			}
			continue
		}
		if !h.ResultTruncated || h.ResultBytes != n || len(h.ResultPrefix) > limit || len(h.ResultPrefix) < limit-utf8.UTFMax ||
			!utf8.ValidString(h.ResultPrefix) || !strings.HasPrefix(string(res), h.ResultPrefix) {
			t.Errorf("%d bytes: prefix %d bytes %q..., truncated %v, bytes %d", n, len(h.ResultPrefix), h.ResultPrefix[:8], h.ResultTruncated, h.ResultBytes)
		}
	}
}

// What a crash left in the results directory is removed at start.
func TestRemoveSpills(t *testing.T) {
	s := &Service{cfg: Config{DataDir: t.TempDir()}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := os.MkdirAll(s.resultsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".result-123", "odd"} {
		if err := os.WriteFile(filepath.Join(s.resultsDir(), name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.removeSpills()
	if ents, err := os.ReadDir(s.resultsDir()); err != nil || len(ents) != 0 {
		t.Fatalf("results dir after removeSpills: %v, %v", ents, err)
	}
}
