package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli/clitest"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// thaw prepare prints every strategy's step from its description: its
// build's fields (nested ones by their path) and why a strategy was not
// prepared.
func TestPrintPrepareGeneric(t *testing.T) {
	reap, _ := restore.Lookup(restore.REAP)
	info, _ := json.Marshal(wire.Info{StrategyDetails: []wire.StrategyDescription{reap.Describe()}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(info)
	}))
	defer srv.Close()
	build, _ := json.Marshal(restore.REAPBuild{FaultedPages: 3874, WorkingSetBytes: 15867904})
	res := &wire.PrepareResult{Function: "hello", Prepared: map[string]*wire.PreparedStrategy{
		"reap":    {RecordMS: 96, BuildMS: 38, Build: build},
		"other":   {RecordMS: 5, Build: json.RawMessage(`{"stats":{"pages":3}}`)},
		"snapbpf": {Unavailable: "snapbpf capture unavailable: no tracefs"}}}
	var out bytes.Buffer
	a := &cli.App{Stdout: &out, Stderr: io.Discard, C: client.New(srv.URL), Ctx: context.Background()}
	if err := a.PrintPrepare(res); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	clitest.WantContains(t, "stdout", out.String(), "reap:", "recorded in 96.0 ms", "faulted pages", "3874 pages", "working set bytes", "15.1 MiB",
		"other:", "stats pages", "snapbpf:", "not prepared: snapbpf capture unavailable: no tracefs")
}
