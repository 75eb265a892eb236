package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api/apitest"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/vmmtest"
	"github.com/thaw-dev/thaw/wire"
)

// fakeDaemon is the API over a whole daemon on the fake VMM (everything
// but QEMU and the guest is real, so it needs root), served on loopback
// TCP. Every answer the returned client gets is checked against
// openapi.json.
func fakeDaemon(t *testing.T) (*daemon.Service, *vmmtest.Fake, *httptest.Server, *client.Client) {
	t.Helper()
	h := vmmtest.NewHost(t, "thaw-api-")
	b := &vmmtest.Fake{}
	svc, err := daemon.New(context.Background(), daemon.Config{DataDir: h.DataDir, ImageDir: h.ImageDir, Accel: "tcg", DefaultMemoryMiB: 128,
		DefaultVCPUs: 1, BootTimeout: 10 * time.Second, InvokeTimeout: 5 * time.Second, StoreDir: h.StoreDir, VMM: b}, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	srv := httptest.NewServer(New(svc, discard, Options{Token: testToken}))
	t.Cleanup(srv.Close)
	ch := checker(t)
	c := client.New(srv.URL, client.WithToken(testToken), client.WithPollInterval(20*time.Millisecond),
		client.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
			return &apitest.Transport{Checker: ch, Base: rt, Report: t.Errorf}
		}))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte("def handle(e): return e\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateFunctionFromDir(context.Background(), "echo", dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	return svc, b, srv, c
}

// bootedEcho is fakeDaemon's server and client with a VM of echo booted.
func bootedEcho(t *testing.T) (*httptest.Server, *client.Client, *client.VM) {
	t.Helper()
	_, _, srv, c := fakeDaemon(t)
	vm, err := c.BootVM(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, vm
}

// send makes a raw request (checked against openapi.json) and returns the
// answer and its body.
func send(t *testing.T, srv *httptest.Server, method, target, body string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, srv.URL+target, rd)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := checker(t).CheckResponse(req, resp.StatusCode, resp.Header, b); err != nil {
		t.Errorf("openapi: %v", err)
	}
	return resp, b
}

func decodeOp(t *testing.T, b []byte) *wire.Operation {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var op wire.Operation
	if err := dec.Decode(&op); err != nil {
		t.Fatalf("operation %s: %v", b, err)
	}
	return &op
}

// ?wait=false: 202 with the operation and its Location; the boot goes on
// after the request (and its connection) is gone, and ends with the VM the
// catalog has.
func TestAPIBootOperation(t *testing.T) {
	_, b, srv, c := fakeDaemon(t)
	release := b.HoldReady()
	defer release()
	resp, body := send(t, srv, "POST", "/v1/vms?wait=false", `{"function":"echo"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	op := decodeOp(t, body)
	if resp.Header.Get("Location") != "/v1/operations/"+op.ID || op.Kind != "boot" || op.Target != "echo" || op.State != "running" {
		t.Fatalf("Location %q, operation %+v", resp.Header.Get("Location"), op)
	}
	srv.Client().CloseIdleConnections() // the client is gone
	var phases []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	time.AfterFunc(300*time.Millisecond, release)
	done, err := c.WaitOperation(ctx, op.ID, func(o *client.Operation) { phases = append(phases, o.Progress.Phase) })
	if err != nil {
		t.Fatal(err)
	}
	if done.State != "succeeded" || done.Result == nil || done.Result.VM == nil || done.Error != nil {
		t.Fatalf("finished %+v", done)
	}
	if !strings.Contains(strings.Join(phases, ","), "booting") || phases[len(phases)-1] != "done" {
		t.Errorf("phases seen %q", phases)
	}
	vm, err := c.GetVM(ctx, done.Result.VM.ID)
	if err != nil || vm.State != "running" || vm.BootMS != done.Result.VM.BootMS || vm.Function != "echo" {
		t.Errorf("GET the VM: %+v (%v); the operation: %+v", vm, err, done.Result.VM)
	}
	_, body = send(t, srv, "GET", "/v1/operations/"+op.ID, "")
	if got := decodeOp(t, body); got.State != "succeeded" || got.Result.VM.ID != vm.ID {
		t.Errorf("GET the operation: %s", body)
	}
	ops, err := c.ListOperations(ctx)
	if err != nil || len(ops) != 1 || ops[0].ID != op.ID {
		t.Errorf("list %+v %v", ops, err)
	}
	resp, body = send(t, srv, "GET", "/v1/operations?limit=1&after=!", "")
	if resp.StatusCode != 400 {
		t.Errorf("a bad cursor: %d %s", resp.StatusCode, body)
	}
	if err := c.DeleteOperation(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Operation(ctx, op.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a forgotten operation: %v", err)
	}
}

// A boot whose VMM fails to start ends failed, with the status and error
// the synchronous boot answers.
func TestAPIFailedOperation(t *testing.T) {
	_, b, srv, c := fakeDaemon(t)
	b.SetStart(func(vmm.Spec) error { return errors.New("no such device") })
	resp, syncBody := send(t, srv, "POST", "/v1/vms", `{"function":"echo"}`)
	var syncErr wire.Error
	if err := json.Unmarshal(syncBody, &syncErr); err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("synchronous boot: %d %s", resp.StatusCode, syncBody)
	}
	op, err := c.StartBootVM(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.WaitOperation(context.Background(), op.ID, nil)
	if !errors.Is(err, client.ErrVMFailed) || done == nil || done.State != "failed" || done.Error == nil || done.Result != nil {
		t.Fatalf("%+v: %v", done, err)
	}
	e := done.Error
	if e.Status != resp.StatusCode || e.Code != syncErr.Error.Code || !strings.Contains(e.Message, "no such device") || !strings.HasPrefix(e.RequestID, "req-") {
		t.Errorf("operation's error %+v, the synchronous answer %s", e, syncBody)
	}
}

// Store and copy as operations end with the bodies the synchronous
// requests answer.
func TestAPIStoreAndCopyOperations(t *testing.T) {
	srv, c, vm := bootedEcho(t)
	ctx := context.Background()
	sn, err := c.CreateSnapshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.StartStoreSnapshot(ctx, sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.WaitOperation(ctx, op.ID, nil)
	if err != nil || done.Kind != "store" || done.Result.Store == nil {
		t.Fatalf("%+v %v", done, err)
	}
	again, err := c.StoreSnapshot(ctx, sn.ID) // storing a stored snapshot answers its entry
	if err != nil || !reflect.DeepEqual(again, done.Result.Store) {
		t.Errorf("synchronous store %+v (%v), the operation's %+v", again, err, done.Result.Store)
	}
	op, err = c.StartCopySnapshot(ctx, sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	done, err = c.WaitOperation(ctx, op.ID, nil)
	if err != nil || done.Result.Snapshot == nil {
		t.Fatalf("%+v %v", done, err)
	}
	copied, err := c.GetSnapshot(ctx, done.Result.Snapshot.ID)
	if err != nil || !reflect.DeepEqual(copied, done.Result.Snapshot) {
		t.Errorf("GET the copy %+v (%v), the operation's %+v", copied, err, done.Result.Snapshot)
	}
	// What is wrong before anything starts is answered at once.
	for _, r := range []struct {
		method, target, body string
		status               int
	}{
		{"POST", "/v1/snapshots/snap-000000000000/copy?wait=false", "", 404},
		{"PUT", "/v1/snapshots/snap-000000000000/store?wait=false", "", 404},
		{"POST", "/v1/vms?wait=false", `{"function":"nope"}`, 404},
		{"POST", "/v1/vms?wait=false", `{"snapshot":"` + sn.ID + `"}`, 400},
		{"POST", "/v1/functions/nope/prepare?wait=false", `{}`, 404},
		{"POST", "/v1/vms?wait=bogus", `{"function":"echo"}`, 400},
		{"POST", "/v1/snapshots/" + sn.ID + "/copy?wait=1", "", 400},
		{"PUT", "/v1/snapshots/" + sn.ID + "/store?wait=no", "", 400},
		{"POST", "/v1/functions/echo/prepare?wait=maybe", `{}`, 400},
		{"GET", "/v1/operations/op-000000000000", "", 404},
		{"GET", "/v1/operations/nope", "", 400},
		{"DELETE", "/v1/operations/op-000000000000", "", 404},
	} {
		resp, body := send(t, srv, r.method, r.target, r.body)
		if resp.StatusCode != r.status {
			t.Errorf("%s %s: %d %s, want %d", r.method, r.target, resp.StatusCode, body, r.status)
		}
	}
	// ?wait=true keeps the synchronous answer.
	resp, body := send(t, srv, "POST", "/v1/snapshots/"+sn.ID+"/copy?wait=true", "")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "" {
		t.Errorf("wait=true copy: %d %s", resp.StatusCode, body)
	}
}

// Closing the daemon fails a running operation with 409 conflict.
func TestAPIOperationFailsOnClose(t *testing.T) {
	svc, b, srv, c := fakeDaemon(t)
	release := b.HoldReady()
	defer release()
	op, err := c.StartBootVM(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { svc.Close(context.Background()); close(closed) }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return")
	}
	resp, body := send(t, srv, "GET", "/v1/operations/"+op.ID, "")
	got := decodeOp(t, body)
	if resp.StatusCode != 200 || got.State != "failed" || got.Error == nil || got.Error.Status != http.StatusConflict || got.Error.Code != "conflict" {
		t.Errorf("after close: %d %s", resp.StatusCode, body)
	}
}
