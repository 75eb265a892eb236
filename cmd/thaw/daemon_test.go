package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/api/apitest"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/internal/vmm/vmmtest"
)

// realDaemon is thawd itself, its service and API, on the fake VMM
// (everything but QEMU and the guest is real: it needs root), served on
// loopback TCP with an API token. Every answer it gives is checked
// against openapi.json.
type realDaemon struct {
	svc *daemon.Service
	vmm *vmmtest.Fake
	srv *httptest.Server
}

const realToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func newRealDaemon(t *testing.T, edit func(*daemon.Config)) *realDaemon {
	t.Helper()
	h := vmmtest.NewHost(t, "thaw-cli-")
	b := &vmmtest.Fake{}
	cfg := daemon.Config{DataDir: h.DataDir, ImageDir: h.ImageDir, Accel: "tcg", DefaultMemoryMiB: 128, DefaultVCPUs: 1,
		BootTimeout: 10 * time.Second, InvokeTimeout: 5 * time.Second, StoreDir: h.StoreDir, VMM: b}
	if edit != nil {
		edit(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := daemon.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	check, err := apitest.Load(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	handler := api.New(svc, log, api.Options{Token: realToken})
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: 200}
		handler.ServeHTTP(rec, r)
		mu.Lock()
		defer mu.Unlock()
		if err := check.CheckResponse(r, rec.status, w.Header(), rec.body.Bytes()); err != nil {
			t.Errorf("%s %s: the answer does not match openapi.json: %v", r.Method, r.URL, err)
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("THAW_TOKEN", realToken)
	return &realDaemon{svc: svc, vmm: b, srv: srv}
}

// recorder keeps what a handler answers.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }
func (r *recorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// thaw runs the command line against the daemon.
func (d *realDaemon) thaw(t *testing.T, args ...string) result {
	t.Helper()
	return (&fakeDaemon{Server: d.srv}).thaw(t, args...)
}

// echoFunction creates function name, whose handler the fake guest runs
// as an echo of its event ({"op": "hang"} never answers, {"op": "raise"}
// raises), and returns its code directory.
func (d *realDaemon) echoFunction(t *testing.T, name string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte("def handle(e): return e\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := d.thaw(t, append([]string{"function", "create", name, "--dir", dir, "-q"}, args...)...)
	wantCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != name {
		t.Fatalf("function create -q printed %q, want %q", r.stdout, name)
	}
	return dir
}

// bootSnapshot boots function name and snapshots the VM with the CLI's
// -q output, returning the VM's and the snapshot's ids.
func (d *realDaemon) bootSnapshot(t *testing.T, name string) (vm, snap string) {
	t.Helper()
	r := d.thaw(t, "vm", "boot", name, "-q")
	wantCode(t, r, 0)
	vm = strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(vm, "vm-") || strings.Contains(vm, "\n") || r.stderr != "" {
		t.Fatalf("vm boot -q: stdout %q, stderr %q: want only the VM's id", r.stdout, r.stderr)
	}
	r = d.thaw(t, "snapshot", "create", vm, "-q")
	wantCode(t, r, 0)
	snap = strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(snap, "snap-") || strings.Contains(snap, "\n") {
		t.Fatalf("snapshot create -q: %q", r.stdout)
	}
	return vm, snap
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	polltest.Until(t, 10*time.Second, "the condition", cond)
}
