package history

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/thaw-dev/thaw/wire"
)

// The history's copy of an invocation is bounded (result, error texts),
// and the caller's is left whole.
func TestHistoryKeepsABoundedCopy(t *testing.T) {
	big := json.RawMessage(`"` + strings.Repeat("é", 100000) + `"`)
	inv := &wire.Invocation{ID: "inv-1", OK: true, Result: big, Error: &wire.FunctionError{Type: "E", Message: strings.Repeat("m", 20000), Traceback: "tb"}}
	h := forHistory(inv, 1000)
	if string(inv.Result) != string(big) || len(inv.Error.Message) != 20000 {
		t.Fatalf("the caller's copy was changed")
	}
	if h.Result != nil || !h.ResultTruncated || h.ResultBytes != len(big) || len(h.ResultPrefix) > 1000 || !utf8.ValidString(h.ResultPrefix) {
		t.Fatalf("history copy: truncated=%v bytes=%d prefix %d bytes", h.ResultTruncated, h.ResultBytes, len(h.ResultPrefix))
	}
	if len(h.Error.Message) != maxStoredText || !h.ErrorTruncated || h.Error.Traceback != "tb" {
		t.Fatalf("error not cut: %d", len(h.Error.Message))
	}
	small := &wire.Invocation{Result: json.RawMessage(`{"a":1}`)}
	if h := forHistory(small, 1000); string(h.Result) != `{"a":1}` || h.ResultTruncated {
		t.Fatalf("small result changed: %+v", h)
	}
}

// Results just over the history's limit, cut inside a multi-byte
// character or not, keep a valid prefix of at most the limit.
func TestHistoryPrefixAtTheLimit(t *testing.T) {
	const limit = 1024
	for n := limit - 1; n <= limit+6; n++ {
		res := json.RawMessage(`"` + strings.Repeat("é", n) + `"`)[:n]
		h := forHistory(&wire.Invocation{Result: res}, limit)
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
	h := New(Config{DataDir: t.TempDir()}, Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	dir := ResultsDir(h.cfg.DataDir)
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".result-123", "odd"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.RemoveSpills()
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("results dir after RemoveSpills: %v, %v", ents, err)
	}
}
