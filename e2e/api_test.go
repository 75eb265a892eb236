package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// TestBadInput checks that malformed requests, invalid names, unknown
// resources, oversized bodies and wrong states get clear errors with the
// right status, through the real daemon and HTTP handler.
func TestBadInput(t *testing.T) {
	parallel(t)
	e, ctx := helloEnv(t)
	for _, tc := range badInputCases() {
		t.Run(tc.name, func(t *testing.T) { checkBadInput(t, e, tc) })
	}

	t.Run("archive with path traversal", func(t *testing.T) { checkTraversalArchive(t, e, ctx) })

	t.Run("unknown strategy names the valid ones", func(t *testing.T) {
		_, err := e.c.RestoreVM(ctx, "snap-000000000000", "magic")
		wantAPIError(t, err, client.ErrInvalid, 400, "vanilla")
	})
}

// badInput is a request TestBadInput sends, the status it must get and
// what the error's message must mention.
type badInput struct {
	name, method, path, body string
	status                   int
	contains                 string
}

func badInputCases() []badInput {
	big := `{"event":"` + strings.Repeat("x", 7<<20) + `"}`
	return []badInput{
		{"unknown function", "GET", "/v1/functions/nope", "", 404, `"nope"`},
		{"unknown vm", "GET", "/v1/vms/vm-000000000000", "", 404, "vm-000000000000"},
		{"unknown snapshot", "GET", "/v1/snapshots/snap-000000000000", "", 404, "snap-000000000000"},
		{"invoke unknown snapshot", "POST", "/v1/snapshots/snap-000000000000/invoke", `{}`, 404, "snap-000000000000"},
		{"invoke unknown vm", "POST", "/v1/vms/vm-000000000000/invoke", `{}`, 404, "vm-000000000000"},
		{"boot unknown function", "POST", "/v1/vms", `{"function":"ghost"}`, 404, `"ghost"`},
		{"snapshot unknown vm", "POST", "/v1/snapshots", `{"vm":"vm-000000000000"}`, 404, "vm-000000000000"},
		{"delete unknown function", "DELETE", "/v1/functions/nope", "", 404, "nope"},
		{"malformed vm id", "GET", "/v1/vms/../../etc", "", 404, ""},
		{"malformed vm id 2", "GET", "/v1/vms/VM_1", "", 400, "malformed"},
		{"malformed snapshot id", "DELETE", "/v1/snapshots/snap-xyz", "", 400, "malformed"},
		{"invalid function name", "POST", "/v1/functions", `{"name":"Bad_Name","directory":"/tmp"}`, 400, "Bad_Name"},
		{"invalid name in path", "GET", "/v1/functions/Bad_Name", "", 400, "Bad_Name"},
		{"malformed JSON", "POST", "/v1/functions", `{"name":`, 400, "malformed JSON"},
		{"trailing garbage", "POST", "/v1/vms", `{"function":"hello"} x`, 400, "malformed JSON"},
		{"unknown field", "POST", "/v1/vms", `{"function":"hello","memory":1}`, 400, "unknown field"},
		{"empty body", "POST", "/v1/snapshots", ``, 400, "empty"},
		{"oversized body", "POST", "/v1/vms", `{"function":"` + strings.Repeat("a", 2<<20) + `"}`, 400, "exceeds"},
		{"oversized event", "POST", "/v1/functions/hello/invoke", big, 400, "exceeds"},
		{"no directory", "POST", "/v1/functions", `{"name":"x"}`, 400, "directory"},
		{"a host directory over TCP", "POST", "/v1/functions", `{"name":"x","directory":"` + repoPath("functions/hello") + `"}`, 403, "Unix socket"},
		{"bad egress", "POST", "/v1/functions", `{"name":"x","directory":"/x","network":{"egress":"everywhere"}}`, 400, "everywhere"},
		{"duplicate function", "POST", "/v1/functions", `{"name":"hello","directory":"` + repoPath("functions/hello") + `"}`, 409, "hello"},
		{"boot and restore at once", "POST", "/v1/vms", `{"function":"hello","snapshot":"snap-000000000000"}`, 400, "either"},
		{"no snapshot yet", "POST", "/v1/functions/hello/invoke", `{"event":{}}`, 409, "no snapshot"},
		{"bad timeout", "POST", "/v1/vms/vm-000000000000/invoke", `{"timeout_ms":-5}`, 400, "timeout"},
		{"unknown endpoint", "GET", "/v1/nothing", "", 404, "no such endpoint"},
		{"wrong method", "PUT", "/v1/functions", "", 405, "not allowed"},
		{"archive not gzip", "POST", "/v1/functions?name=arch", "plain text", 400, ""},
	}
}

// checkBadInput sends tc's request and checks it gets an error document
// with the status and message wanted.
func checkBadInput(t *testing.T, e *env, tc badInput) {
	req, _ := http.NewRequest(tc.method, e.srv.URL+tc.path, strings.NewReader(tc.body))
	req.Header.Set("Authorization", "Bearer "+e.token)
	if tc.name == "archive not gzip" {
		req.Header.Set("Content-Type", "application/gzip")
	} else if tc.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Message == "" {
		t.Fatalf("status %d, body is not an error document: %.300s", resp.StatusCode, b)
	}
	if resp.StatusCode != tc.status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, eb.Error.Message)
	}
	if !strings.Contains(eb.Error.Message, tc.contains) {
		t.Fatalf("message %q does not mention %q", eb.Error.Message, tc.contains)
	}
}

// checkTraversalArchive: a valid archive is accepted; a hand-made one
// whose entry escapes the function directory is refused, and no function
// is created from it.
func checkTraversalArchive(t *testing.T, e *env, ctx context.Context) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte("def handle(e):\n    return e\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateFunctionFromDir(ctx, "fromarchive", dir, 0, 0); err != nil {
		t.Fatalf("valid archive refused: %v", err)
	}
	bad := tarGz(t, map[string]string{"../evil.py": "x", "handler.py": "def handle(e): pass\n"})
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/functions?name=evil", bytes.NewReader(bad))
	req.Header.Set("Content-Type", "application/gzip")
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("traversal archive: status %d", resp.StatusCode)
	}
	if _, err := e.c.GetFunction(ctx, "evil"); err == nil {
		t.Fatal("function from a traversal archive was created")
	}
}

// TestAcceleratorProbe boots the real guest kernel in probe mode. TCG must
// boot it (this proves the probe detects a booted guest); KVM is whatever
// this host gives: the daemon's own probe decides, and on a paravirtual-KVM
// host it must fall back to TCG.
func TestAcceleratorProbe(t *testing.T) {
	im, err := guestimage.Load(imageDir(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kernel, initrd := im.Path(im.KernelFile()), im.Path(guestimage.Initrd)
	tcg := qemu.ProbeAccel(ctx, vmm.AccelTCG, kernel, initrd, t.TempDir(), 60*time.Second)
	if !tcg.OK {
		t.Fatalf("TCG probe failed: %s", tcg.Detail)
	}
	t.Logf("tcg probe: %s", tcg.Detail)
	t.Setenv("THAW_ACCEL", "auto")
	e := startEnv(t, t.TempDir())
	info, err := e.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("daemon: %+v", info.Accel)
	if info.Accel.Source != "probe" || (info.Accel.Accel != "tcg" && info.Accel.Accel != "kvm") {
		t.Fatalf("daemon accelerator %+v", info.Accel)
	}
	// Paravirtual KVM (kvm_pvm) accepts KVM_CREATE_VM but hangs stock
	// kernels: the probe must see through it.
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil && info.Accel.Accel != "tcg" {
		t.Fatalf("host has kvm_pvm, yet the daemon chose %s", info.Accel.Accel)
	}
}
