package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/api/apitest"
)

// TestBootOperation boots a real VM with ?wait=false: 202 with the
// operation and its Location at once, then polled through its phases to
// the booted VM, which answers a warm invocation. Every answer is checked
// against openapi.json.
func TestBootOperation(t *testing.T) {
	parallel(t)
	e, ctx := helloEnv(t)
	check, err := apitest.Load(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/vms?wait=false", strings.NewReader(`{"function":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := check.CheckResponse(req, resp.StatusCode, resp.Header, body); err != nil {
		t.Errorf("openapi: %v", err)
	}
	var op client.Operation
	if err := json.Unmarshal(body, &op); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%d %s (%v)", resp.StatusCode, body, err)
	}
	if loc := resp.Header.Get("Location"); loc != "/v1/operations/"+op.ID || op.State != "running" || op.Kind != "boot" {
		t.Fatalf("Location %q, operation %s", loc, body)
	}

	var phases []string
	done, err := e.c.WaitOperation(ctx, op.ID, func(o *client.Operation) {
		if len(phases) == 0 || phases[len(phases)-1] != o.Progress.Phase {
			phases = append(phases, o.Progress.Phase)
		}
	})
	if err != nil {
		t.Fatalf("%v (phases %q)", err, phases)
	}
	t.Logf("phases %q", phases)
	if !slices.Contains(phases, "booting") || phases[len(phases)-1] != "done" {
		t.Errorf("phases %q: want booting, ..., done", phases)
	}
	vm := done.Result.VM
	if done.State != "succeeded" || vm == nil || vm.State != "running" || vm.BootMS <= 0 {
		t.Fatalf("finished %+v", done)
	}
	got, err := e.c.GetVM(ctx, vm.ID)
	if err != nil || got.State != "running" || got.BootMS != vm.BootMS {
		t.Errorf("GET the VM: %+v (%v)", got, err)
	}
	inv, err := e.c.InvokeVM(ctx, vm.ID, json.RawMessage(`{"name":"operation"}`), client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("warm invocation of the booted VM: %+v (%v)", inv, err)
	}
	ops, err := e.c.ListOperations(ctx)
	if err != nil || len(ops) != 1 || ops[0].ID != op.ID || ops[0].State != "succeeded" {
		t.Errorf("list %+v (%v)", ops, err)
	}
	if err := e.c.DeleteVM(ctx, vm.ID); err != nil {
		t.Error(err)
	}
}
