package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/api/apitest"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/logtest"
)

// watched is a daemon whose every output is kept: its log at debug
// level, its spans and every API answer its client got.
type watched struct {
	*env
	log     *logtest.Buffer
	spans   *tracetest.SpanRecorder
	answers *logtest.Buffer
	cfg     daemon.Config
}

// recording keeps every answer's body (and passes it on unchanged).
type recording struct {
	base http.RoundTripper
	to   io.Writer
}

func (r *recording) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(r.to, "%s %s -> %d\n%s\n", req.Method, req.URL, resp.StatusCode, b)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

func startWatched(t *testing.T) *watched {
	t.Helper()
	dataDir := t.TempDir()
	w := &watched{log: &logtest.Buffer{}, spans: tracetest.NewSpanRecorder(), answers: &logtest.Buffer{}}
	var logw io.Writer = w.log
	if testing.Verbose() {
		logw = io.MultiWriter(w.log, os.Stderr)
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(w.spans))
	w.cfg = testConfig(t, dataDir)
	w.cfg.TracerProvider = tp
	svc, err := daemon.New(context.Background(), w.cfg, log)
	if err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	token, _, err := api.LoadOrCreateToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	h := api.New(svc, log, api.Options{Token: token, TracerProvider: tp})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = h.ConnContext
	srv.Start()
	w.env = &env{t: t, dataDir: dataDir, svc: svc, srv: srv, token: token}
	check, err := apitest.Load(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	w.c = client.New(srv.URL, client.WithToken(token), client.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
		return &apitest.Transport{Checker: check, Base: &recording{base: rt, to: w.answers}, Report: t.Errorf}
	}))
	t.Cleanup(w.stop)
	return w
}

// forms are the ways a value could be written down that a search must
// cover: itself, hex, base64 in both alphabets.
func forms(value string) map[string][]byte {
	v := []byte(value)
	return map[string][]byte{"raw": v, "hex": []byte(hex.EncodeToString(v)),
		"base64": []byte(base64.StdEncoding.EncodeToString(v)), "base64url": []byte(base64.RawURLEncoding.EncodeToString(v))}
}

// wantAbsent fails t if what holds any form of any value.
func wantAbsent(t *testing.T, where string, what []byte, values ...string) {
	t.Helper()
	for _, v := range values {
		for form, b := range forms(v) {
			if i := bytes.Index(what, b); i >= 0 {
				t.Errorf("%s holds a secret (%s) at %d", where, form, i)
			}
		}
	}
}

// wantAbsentUnder searches every regular file under dir, chunk by chunk
// (holes read as zeros), for every form of the values.
func wantAbsentUnder(t *testing.T, dir string, values ...string) (files int, bytesRead int64) {
	t.Helper()
	maxLen := 0
	for _, v := range values {
		for _, b := range forms(v) {
			maxLen = max(maxLen, len(b))
		}
	}
	const chunk = 8 << 20
	buf := make([]byte, maxLen+chunk)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		files++
		keep := 0 // the last chunk's tail, before this one
		for {
			n, err := io.ReadFull(f, buf[keep:keep+chunk])
			bytesRead += int64(n)
			if n > 0 {
				data := buf[:keep+n]
				wantAbsent(t, p, data, values...)
				keep = min(maxLen-1, len(data))
				copy(buf, data[len(data)-keep:])
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, bytesRead
}

// seen is what the secrets test function reports.
type seen struct {
	ImportGreeting *string `json:"import_greeting"`
	ImportSecret   bool    `json:"import_secret"`
	Greeting       *string `json:"greeting"`
	Digest         *string `json:"digest"`
	OnRestore      *string `json:"on_restore"`
}

func seenBy(t *testing.T, inv *client.Invocation) seen {
	t.Helper()
	if !inv.OK {
		t.Fatalf("invocation failed: %+v", inv.Error)
	}
	var s seen
	if err := json.Unmarshal(inv.Result, &s); err != nil {
		t.Fatalf("result %s: %v", inv.Result, err)
	}
	return s
}

func sha(v string) string {
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:])
}

func randomSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "e2e-s3cr3t-" + hex.EncodeToString(b)
}

// TestSecretsNeverInSnapshots: a secret reaches a real guest restored from
// a snapshot (in os.environ before on_restore), never the booted VM the
// snapshot is taken of; a new value takes effect at the next cold start
// without a new snapshot (the idle VM holding the old one is stopped);
// and neither value is anywhere the daemon writes or answers: its log,
// its spans, every API answer (what --json prints), the metrics page, the
// invocation history, any file under the data directory (snapshot memory
// and device state, console logs, catalog, secret store) or the memory
// store.
func TestSecretsNeverInSnapshots(t *testing.T) {
	parallel(t)
	w := startWatched(t)
	ctx := ctxT(t)
	c := w.c
	first, second := randomSecret(t), randomSecret(t)
	s, err := c.SetSecret(ctx, "db", []byte(first))
	if err != nil || s.Version != 1 || len(s.Digest) != 64 {
		t.Fatalf("set secret: %+v %v", s, err)
	}
	greeting := "hello from the environment"
	_, err = c.CreateFunctionFromDir(ctx, "app", repoPath("e2e/testdata/secrets"), 256, 1,
		client.WithEnv(map[string]string{"GREETING": greeting}), client.WithSecrets(map[string]string{"DB_PASSWORD": "db"}))
	if err != nil {
		t.Fatal(err)
	}
	vm, snap := snapshotBoot(t, c, "app")
	warm, err := c.InvokeVM(ctx, vm.ID, json.RawMessage(`{}`), client.InvokeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := seenBy(t, warm); got.ImportSecret || got.Digest != nil || got.ImportGreeting == nil || *got.ImportGreeting != greeting {
		t.Fatalf("the booted VM saw %+v: want the environment at import and no secret", got)
	}
	if err := c.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}

	cold := checkColdStartSecret(t, ctx, c, greeting, first)

	// A new value: the idle VM holding the old one goes, the next cold
	// start from the same snapshot has the new one.
	if s, err = c.SetSecret(ctx, "db", []byte(second)); err != nil || s.Version != 2 {
		t.Fatalf("set again: %+v %v", s, err)
	}
	if v, err := c.GetVM(ctx, cold.VM); err == nil && v.State == "running" {
		t.Errorf("the idle VM holding the old value still runs")
	}
	again, err := c.InvokeFunction(ctx, "app", json.RawMessage(`{}`), client.InvokeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := seenBy(t, again); again.Mode != "cold" || again.Snapshot != snap.ID || *got.Digest != sha(second) || *got.OnRestore != sha(second) {
		t.Fatalf("after the change: %s from %s saw %+v", again.Mode, again.Snapshot, got)
	}
	if snaps, err := c.ListSnapshots(ctx, "app"); err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots %v %v: a new value needs none", snaps, err)
	}
	if _, err := c.StoreSnapshot(ctx, snap.ID); err != nil { // its copy in the memory store is searched too
		t.Fatal(err)
	}
	if _, err := c.CopySnapshot(ctx, snap.ID); err != nil { // scanned, and clean
		t.Fatal(err)
	}
	if err := c.DeleteSecret(ctx, "db"); err == nil || !strings.Contains(err.Error(), "used by function(s) app") {
		t.Errorf("delete of a secret in use: %v", err)
	}

	checkSecretsAbsent(t, ctx, w, first, second)
}

// checkColdStartSecret: a cold start has the secret in on_restore and the
// handler, and the environment since import; the next invocation runs on
// the pooled VM with the same value. It returns the cold start.
func checkColdStartSecret(t *testing.T, ctx context.Context, c *client.Client, greeting, first string) *client.Invocation {
	t.Helper()
	cold, err := c.InvokeFunction(ctx, "app", json.RawMessage(`{}`), client.InvokeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := seenBy(t, cold)
	if cold.Mode != "cold" || got.ImportSecret || got.Digest == nil || *got.Digest != sha(first) || got.OnRestore == nil ||
		*got.OnRestore != sha(first) || *got.ImportGreeting != greeting || *got.Greeting != greeting {
		t.Fatalf("cold start (%s) saw %+v: want the secret in on_restore and the handler, the environment since import", cold.Mode, got)
	}
	if rt := cold.Timing.Restore; rt != nil {
		t.Logf("cold start: the guest's restore took %.1f ms, %.2f ms of it setting the secret", rt.AgentRestoreMS, rt.AgentSteps["secrets"])
	}
	if pooled, err := c.InvokeFunction(ctx, "app", json.RawMessage(`{}`), client.InvokeOptions{}); err != nil || pooled.Mode != "pooled" ||
		*seenBy(t, pooled).Digest != sha(first) {
		t.Fatalf("second invocation: %v %+v", err, pooled)
	}
	return cold
}

// checkSecretsAbsent: neither value is anywhere the daemon writes or
// answers, while the kept VM still runs.
func checkSecretsAbsent(t *testing.T, ctx context.Context, w *watched, first, second string) {
	t.Helper()
	c := w.c
	if _, err := c.ListInvocations(ctx, "app", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSecrets(ctx); err != nil {
		t.Fatal(err)
	}
	metrics := get(t, w.env, "/metrics")
	wantAbsent(t, "the metrics page", metrics, first, second)
	wantAbsent(t, "the API's answers", w.answers.Bytes(), first, second)
	wantAbsent(t, "the daemon's log", w.log.Bytes(), first, second)
	for _, sp := range w.spans.Ended() {
		b, _ := json.Marshal(map[string]any{"name": sp.Name(), "attrs": sp.Attributes(), "events": sp.Events(), "status": sp.Status()})
		wantAbsent(t, "span "+sp.Name(), b, first, second)
	}
	files, n := wantAbsentUnder(t, w.dataDir, first, second)
	sf, sn := wantAbsentUnder(t, w.cfg.StoreDir, first, second)
	if files < 8 || sf < 1 || n < 1<<20 || sn < 1<<20 || !bytes.Contains(w.answers.Bytes(), []byte(`"digest"`)) || len(w.spans.Ended()) < 10 {
		t.Fatalf("searched %d files (%d bytes) and %d in the store (%d bytes), %d spans: too little to mean anything",
			files, n, sf, sn, len(w.spans.Ended()))
	}
	t.Logf("searched %d files (%d MiB) under the data directory, %d (%d MiB) in the memory store, %d spans, %d bytes of log, %d of answers",
		files, n>>20, sf, sn>>20, len(w.spans.Ended()), len(w.log.Bytes()), len(w.answers.Bytes()))
}

// get answers a GET of path on e's daemon (with its token).
func get(t *testing.T, e *env, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return b
}

// TestSnapshotHoldingASecretIsRefused: a function whose environment holds
// a secret's value has it in its booted VM's memory; the snapshot is
// refused, naming the secret and the file, and nothing is published.
func TestSnapshotHoldingASecretIsRefused(t *testing.T) {
	parallel(t)
	e := startEnv(t, t.TempDir())
	ctx := ctxT(t)
	value := randomSecret(t)
	if _, err := e.c.SetSecret(ctx, "db", []byte(value)); err != nil {
		t.Fatal(err)
	}
	_, err := e.c.CreateFunctionFromDir(ctx, "leaky", repoPath("e2e/testdata/secrets"), 256, 1,
		client.WithEnv(map[string]string{"DATABASE_URL": "postgres://app:" + value + "@db/app"}))
	if err != nil {
		t.Fatal(err)
	}
	vm, err := e.c.BootVM(ctx, "leaky")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.CreateSnapshot(ctx, vm.ID)
	wantAPIError(t, err, client.ErrConflict, 409, `secret "db"`)
	if !strings.Contains(err.Error(), "memory holds") || strings.Contains(err.Error(), value) {
		t.Errorf("error %q: want the file named, never the value", err)
	}
	if snaps, err := e.c.ListSnapshots(ctx, ""); err != nil || len(snaps) != 0 {
		t.Errorf("snapshots %v %v: nothing may be published", snaps, err)
	}
	if ents, err := os.ReadDir(filepath.Join(e.dataDir, "snapshots")); err != nil || len(ents) != 0 {
		t.Errorf("snapshots directory holds %v (%v)", ents, err)
	}
	// The VM is untouched: it still answers.
	if _, err := e.c.InvokeVM(ctx, vm.ID, json.RawMessage(`{}`), client.InvokeOptions{}); err != nil {
		t.Errorf("the VM after the refused snapshot: %v", err)
	}
}
