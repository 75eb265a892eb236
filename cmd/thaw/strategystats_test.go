package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// thaw invoke prints the part of the strategy that ran, whichever it is,
// from the daemon's description of it: premap's too, labelled and in its
// units, and fields the description lacks by their names.
func TestInvokePrintsStrategyStats(t *testing.T) {
	premap, _ := restore.Lookup(restore.Premap)
	info, err := json.Marshal(wire.Info{Version: "0.2.0", Strategies: []string{"premap"},
		StrategyDetails: []wire.StrategyDescription{premap.Describe()}})
	if err != nil {
		t.Fatal(err)
	}
	part, _ := json.Marshal(restore.PremapStats{StoreBytes: 94371840, PopulatedBytes: 536870912, PopulateMS: 21.4})
	inv := wire.Invocation{ID: "inv-9", Function: "stored", Mode: "cold", Strategy: "premap", OK: true, Result: json.RawMessage(`1`),
		Timing:        wire.Timing{Restore: &wire.RestoreTiming{SetupMS: 30, ResumeMS: 2}, InvokeMS: 2, TotalMS: 40},
		StrategyStats: &wire.StrategyStats{Kind: "premap", LayoutEntries: 31, Part: append(part[:len(part)-1], []byte(`,"new_field":7}`)...)}}
	body, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for path, b := range map[string][]byte{"GET /v1/info": info, "POST /v1/functions/stored/invoke": body} {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.Copy(w, bytes.NewReader(b))
		})
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := execute(context.Background(), []string{"--url", srv.URL, "invoke", "stored"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	t.Log(errb.String())
	wantContains(t, "stderr", errb.String(), "layout", "31 mappings", "premap store bytes", "90.0 MiB", "premap populated bytes",
		"512.0 MiB", "premap populate ms", "21.4 ms", "pre-faulting it", "premap new field", "7")
}
