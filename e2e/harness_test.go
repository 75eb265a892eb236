// Package e2e boots real QEMU VMs through thaw's API: the daemon's service
// runs in-process behind its real HTTP handler, and tests drive it with the
// typed client, as the CLI does. They need a built guest image: set
// THAW_IMAGE (make test does) or they are skipped with that reason.
package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/api/apitest"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// env is one daemon on one data directory.
type env struct {
	t       testing.TB
	dataDir string
	svc     *daemon.Service
	srv     *httptest.Server
	token   string // the API token the client sends
	c       *client.Client
	stopped bool
}

func imageDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("THAW_IMAGE")
	if dir == "" {
		t.Skip("THAW_IMAGE is not set: end-to-end tests need a built guest image ('make test' builds it and sets THAW_IMAGE)")
	}
	return dir
}

func testConfig(t testing.TB, dataDir string) daemon.Config {
	accel := os.Getenv("THAW_ACCEL")
	if accel == "" {
		accel = "tcg" // the accelerator probe has its own test; skip its 20 s here
	}
	shim := repoPath("shim/build/libthaw_shim.so")
	if _, err := os.Stat(shim); err != nil {
		t.Fatalf("interposer not built (make -C shim): %v", err)
	}
	return daemon.Config{DataDir: dataDir, ImageDir: imageDir(t), Accel: accel,
		DefaultMemoryMiB: 256, DefaultVCPUs: 1, BootTimeout: 120 * time.Second, InvokeTimeout: 60 * time.Second,
		VMMSettings: qemu.Settings{Shim: shim}.Values(), StoreDir: storeDir(t, dataDir), SnapBPFObject: repoPath("bin/snapbpf_capture.bpf.o")}
}

// storeDir is a memory store on /dev/shm for one test daemon, removed with
// the test (whatever snapshots it leaves).
func storeDir(t testing.TB, dataDir string) string {
	dir := filepath.Join("/dev/shm", "thaw-e2e-"+filepath.Base(filepath.Dir(dataDir))+"-"+filepath.Base(dataDir))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func startEnv(t testing.TB, dataDir string) *env {
	t.Helper()
	return startEnvWith(t, dataDir, nil)
}

// startEnvWith starts a daemon whose test configuration edit changed.
func startEnvWith(t testing.TB, dataDir string, edit func(*daemon.Config)) *env {
	t.Helper()
	logw := io.Discard
	if testing.Verbose() {
		logw = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	cfg := testConfig(t, dataDir)
	if edit != nil {
		edit(&cfg)
	}
	svc, err := daemon.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	// A TCP client as in production: the token is required.
	token, _, err := api.LoadOrCreateToken(dataDir)
	if err != nil {
		t.Fatalf("token: %v", err)
	}
	h := api.New(svc, log, api.Options{Token: token, TracerProvider: cfg.TracerProvider})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = h.ConnContext
	srv.Start()
	e := &env{t: t, dataDir: dataDir, svc: svc, srv: srv, token: token}
	e.c = e.client(t)
	t.Cleanup(e.stop)
	return e
}

// helloEnv starts a daemon of t's own with the bundled hello created at
// the daemon's default memory and vCPUs.
func helloEnv(t *testing.T) (*env, context.Context) {
	t.Helper()
	e := startEnv(t, t.TempDir())
	ctx := ctxT(t)
	if _, err := e.c.CreateFunctionFromDir(ctx, "hello", repoPath("functions/hello"), 0, 0); err != nil {
		t.Fatal(err)
	}
	return e, ctx
}

// client is a client of e for test t: every answer is checked against
// openapi.json on the way, and what does not match fails t.
func (e *env) client(t testing.TB) *client.Client {
	check, err := apitest.Load(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	validated := client.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
		return &apitest.Transport{Checker: check, Base: rt, Report: t.Errorf}
	})
	return client.New(e.srv.URL, client.WithToken(e.token), validated)
}

func (e *env) stop() {
	if e.stopped {
		return
	}
	e.stopped = true
	e.srv.Close()
	if err := e.svc.Close(context.Background()); err != nil {
		e.t.Errorf("stop daemon: %v", err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// repoPath resolves a path relative to the repository root.
func repoPath(rel string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", rel)
}

func wantAPIError(t *testing.T, err error, kind error, status int, contains string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want API error %d, got %v", status, err)
	}
	if ae.Status != status || !errors.Is(err, kind) {
		t.Fatalf("want status %d (%v), got %d: %s", status, kind, ae.Status, ae.Message)
	}
	if contains != "" && !strings.Contains(ae.Message, contains) {
		t.Fatalf("error %q does not mention %q", ae.Message, contains)
	}
}

// waitState polls a VM until it reaches state.
func waitState(t *testing.T, c *client.Client, id, state string, within time.Duration) *client.VM {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, err := c.GetVM(context.Background(), id)
		if err != nil {
			t.Fatalf("get vm %s: %v", id, err)
		}
		if v.State == state {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("vm %s is %s (%s), want %s", id, v.State, v.Reason, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func processGone(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return errors.Is(err, os.ErrNotExist)
}

// tarGz builds a gzipped tar with the given entries, names taken verbatim.
func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// parallel runs t beside the other parallel tests, as many at once as go
// test's -parallel allows (GOMAXPROCS by default; make test runs three at
// once on its 2 cores, since many of them wait on timers, links and
// restarts rather than compute).
// Tests that share the booted fixture, set the process's environment,
// count what the whole process holds, measure, or change the host's own
// network state stay serial: they run first, one at a time. THAW_E2E_SERIAL=1 runs every test alone.
func parallel(t *testing.T) {
	if os.Getenv("THAW_E2E_SERIAL") == "" {
		t.Parallel()
	}
}

// atOnce runs f(0), ..., f(n-1) at once, each in a goroutine of its own,
// and returns their results and errors by i.
func atOnce[T any](n int, f func(i int) (T, error)) ([]T, []error) {
	res, errs := make([]T, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { res[i], errs[i] = f(i) })
	}
	wg.Wait()
	return res, errs
}

// outsideSlots are the numbers (20-219) the tests' "outside" namespaces
// use for their names and subnets, held until the test ends: parallel
// tests never share one.
var outsideSlots struct {
	sync.Mutex
	taken map[int]bool
}

// outsideSlot reserves a free number for t; with hostLink (a format with
// one %d), a number whose host interface another process made is skipped
// too.
func outsideSlot(t *testing.T, hostLink string) int {
	t.Helper()
	outsideSlots.Lock()
	defer outsideSlots.Unlock()
	if outsideSlots.taken == nil {
		outsideSlots.taken = map[int]bool{}
	}
	start := rand.IntN(200)
	for i := range 200 {
		n := 20 + (start+i)%200
		if outsideSlots.taken[n] {
			continue
		}
		if hostLink != "" {
			if _, err := net.InterfaceByName(fmt.Sprintf(hostLink, n)); err == nil {
				continue
			}
		}
		outsideSlots.taken[n] = true
		t.Cleanup(func() {
			outsideSlots.Lock()
			defer outsideSlots.Unlock()
			delete(outsideSlots.taken, n)
		})
		return n
	}
	t.Fatal("no free number for an outside namespace")
	return 0
}
