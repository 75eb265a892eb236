package functions

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/dirtest"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/fnconfig"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

func archive(t *testing.T, extra ...archivetest.Entry) *bytes.Reader {
	t.Helper()
	return bytes.NewReader(archivetest.TarGz(t, append([]archivetest.Entry{{Name: "handler.py", Body: "def handle(e): return e\n"}}, extra...)...))
}

// A create records the function with its code directory and disk, tells
// the adaptive restore, folds the environment into the digest and writes
// it on the code disk, and leaves no staging directory.
func TestCreateFunction(t *testing.T) {
	m, f := newManager(t, nil)
	ctx := context.Background()
	fn, err := m.CreateFunction(ctx, Spec{Name: "app", Archive: archive(t), Env: map[string]string{"GREETING": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if fn.MemoryMiB != 256 || fn.VCPUs != 1 {
		t.Errorf("defaults not taken: %d MiB, %d vCPUs", fn.MemoryMiB, fn.VCPUs)
	}
	got, err := m.GetFunction(ctx, "app")
	if err != nil || got.Digest != fn.Digest || got.Disk != fn.Disk {
		t.Fatalf("recorded %+v %v", got, err)
	}
	if !slices.Equal(f.created, []string{"app"}) {
		t.Errorf("adaptive restore told of %v", f.created)
	}
	if filepath.Dir(fn.CodeDir) != filepath.Dir(fn.Disk) || filepath.Dir(filepath.Dir(fn.Disk)) != m.FunctionsDir() {
		t.Errorf("code %s and disk %s are not in one directory of the functions directory", fn.CodeDir, fn.Disk)
	}
	if _, err := os.Stat(fn.Disk); err != nil {
		t.Fatal(err)
	}
	code, _, err := digestTree(filepath.Join(fn.CodeDir, "app"))
	if err != nil || fn.Digest != fnconfig.Digest(code, fn.Env) || fn.Digest == code {
		t.Errorf("digest %s, code digest %s: the environment is not folded in", fn.Digest, code)
	}
	cfg, err := os.ReadFile(filepath.Join(fn.CodeDir, fnconfig.DiskDir, fnconfig.DiskFile))
	if err != nil || !strings.Contains(string(cfg), `"GREETING":"hello"`) {
		t.Errorf("config on the code disk: %s %v", cfg, err)
	}
	if left := dirtest.Names(t, m.FunctionsDir()); len(left) != 1 {
		t.Errorf("functions dir holds %v, want the one function", left)
	}
	if _, err := m.CreateFunction(ctx, Spec{Name: "app", Archive: archive(t)}); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("a second create of the name: %v", err)
	}
	if _, err := m.GetFunction(ctx, "Bad_Name"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("get of a malformed name: %v", err)
	}
}

// A create the adaptive restore refuses leaves nothing: no row, no
// directory.
func TestCreateUndoneWhenAdaptiveRefuses(t *testing.T) {
	m, f := newManager(t, nil)
	f.createErr = errors.New("restore settings not kept")
	_, err := m.CreateFunction(context.Background(), Spec{Name: "app", Archive: archive(t)})
	if err == nil || !strings.Contains(err.Error(), "not kept") {
		t.Fatalf("create = %v", err)
	}
	if fns, _ := m.ListFunctions(context.Background()); len(fns) != 0 {
		t.Errorf("functions recorded: %d", len(fns))
	}
	if left := dirtest.Names(t, m.FunctionsDir()); len(left) != 0 {
		t.Errorf("kept %v", left)
	}
}

// A spec is checked whole: every problem is reported at once, before
// anything is made; a policy the VM network refuses is forbidden.
func TestCheckSpec(t *testing.T) {
	m, _ := newManager(t, nil)
	spec := Spec{Name: "app", MemoryMiB: 64, VCPUs: 17, KeepAliveS: -2, VMMPool: 17, VMMPoolTTLS: -1, MaxConcurrency: 5000,
		Secrets: map[string]string{"PW": "nope"}}
	_, err := m.CheckSpec(&spec)
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("check = %v", err)
	}
	for _, want := range []string{"memory_mib 64", "vcpus 17", "keep_alive_s -2", "vmm_pool 17", "vmm_pool_ttl_s -1",
		"max_concurrency 5000", "either a directory or an archive", "no secret nope"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not report %q", err, want)
		}
	}
	if _, err := m.CheckSpec(&Spec{Name: "no_such"}); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "name") {
		t.Errorf("a malformed name: %v", err)
	}
	m.d.CheckNetwork = func(p vmnet.Policy) error {
		if p.Egress == vmnet.EgressFull {
			return errors.New("full egress is off")
		}
		return nil
	}
	ok := Spec{Name: "app", Archive: archive(t)}
	if netw, err := m.CheckSpec(&ok); err != nil || ok.MemoryMiB != 256 || ok.VCPUs != 1 || netw.Egress != vmnet.EgressNone {
		t.Errorf("a good spec: %v, %+v, %+v", err, ok, netw)
	}
	full := Spec{Name: "app", Archive: archive(t), Network: vmnet.Policy{Egress: vmnet.EgressFull}}
	if _, err := m.CheckSpec(&full); !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("a policy the network refuses: %v", err)
	}
}
