package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/fnconfig"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/secrets"
	"github.com/thaw-dev/thaw/wire"
)

func setSecret(t *testing.T, s *Service, name, value string) SecretInfo {
	t.Helper()
	info, _, err := s.SetSecret(context.Background(), name, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func coldInvoke(t *testing.T, s *Service, fn string) *Invocation {
	t.Helper()
	inv, err := s.InvokeCold(context.Background(), ColdRequest{Function: fn, InvokeRequest: InvokeRequest{Event: json.RawMessage(`"x"`)}})
	if err != nil || !inv.OK {
		t.Fatalf("invoke %s: %v %+v", fn, err, inv)
	}
	return inv
}

// Secrets go to restored VMs only, with their current value; the
// environment is on the code disk and in the digest.
func TestSecretsReachRestoredVMsOnly(t *testing.T) {
	s, b := fakeService(t, func(c *Config) { c.KeepAlive = -1 })
	ctx := context.Background()
	setSecret(t, s, "db", "first-value-0001")
	spec := FunctionSpec{Name: "app", Env: map[string]string{"GREETING": "hello"}, Secrets: map[string]string{"DB_PASSWORD": "db"}}
	vm, _ := bootAndSnapshotSpec(t, s, spec)
	if got := b.Secrets(); len(got) != 0 {
		t.Fatalf("a booted VM got secrets: %v", got)
	}
	fn, err := s.GetFunction(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(fn.CodeDir, fnconfig.DiskDir, fnconfig.DiskFile))
	if err != nil || !strings.Contains(string(cfg), `"GREETING":"hello"`) || strings.Contains(string(cfg), "first-value") {
		t.Fatalf("config on the code disk: %s %v", cfg, err)
	}
	if _, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	coldInvoke(t, s, "app")
	setSecret(t, s, "db", "second-value-002")
	coldInvoke(t, s, "app")
	got := b.Secrets()
	if len(got) != 2 || got[0]["DB_PASSWORD"] != "first-value-0001" || got[1]["DB_PASSWORD"] != "second-value-002" || len(got[0]) != 1 {
		t.Fatalf("restores set %v", got)
	}
	if snaps := snapshotIDs(t, s, "app"); len(snaps) != 1 {
		t.Errorf("snapshots %v: a changed secret needs none", snaps)
	}
}

// A changed secret stops the idle VMs holding the old value, and a VM that
// got the old value is not kept idle after its invocation.
func TestChangedSecretRecyclesKeptVMs(t *testing.T) {
	s, b := fakeService(t, func(c *Config) { c.KeepAlive = time.Minute })
	ctx := context.Background()
	setSecret(t, s, "db", "first-value-0001")
	vm, _ := bootAndSnapshotSpec(t, s, FunctionSpec{Name: "app", Secrets: map[string]string{"DB_PASSWORD": "db"}})
	s.DeleteVM(ctx, vm.ID)
	createFn(t, s, "other")
	first := coldInvoke(t, s, "app")
	if s.pool.Idle() != 1 {
		t.Fatalf("%d idle VMs after a cold invocation", s.pool.Idle())
	}
	setSecret(t, s, "unrelated", "some-other-value")
	if s.pool.Idle() != 1 {
		t.Fatal("an unrelated secret stopped the idle VM")
	}
	setSecret(t, s, "db", "second-value-002")
	if s.pool.Idle() != 0 {
		t.Fatal("the idle VM holding the old value is still kept")
	}
	if _, err := s.GetVM(ctx, first.VM); !errors.Is(err, ErrNotFound) {
		t.Errorf("the recycled VM: %v", err)
	}
	second := coldInvoke(t, s, "app")
	if second.Mode != "cold" || b.Secrets()[len(b.Secrets())-1]["DB_PASSWORD"] != "second-value-002" {
		t.Fatalf("after the change: %s, %v", second.Mode, b.Secrets())
	}
	// A VM holding a value that changed meanwhile is not parked.
	lv, ok := s.vms.Live(second.VM)
	if !ok {
		t.Fatal("the new VM is not kept")
	}
	k := s.pool.Take("app", second.Snapshot)
	setSecret(t, s, "db", "third-value-0003")
	if !s.functions.SecretsStale(lv.SecretDigests) || s.park(lv, k.Rec, second.Snapshot) {
		t.Error("a VM holding an old value was parked")
	}
	s.retire(ctx, lv, k.Rec, "test")
}

// A snapshot whose files hold a secret value (here the function's
// environment, raw or in base64) is refused and nothing is published.
func TestSnapshotHoldingASecretIsRefused(t *testing.T) {
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	value := "hunter2-but-longer-and-rare"
	setSecret(t, s, "db", value)
	for _, env := range []string{value, "prefix" + base64.StdEncoding.EncodeToString([]byte("ab"+value))} {
		name := "leaky-" + map[bool]string{true: "raw", false: "b64"}[env == value]
		createSpec(t, s, FunctionSpec{Name: name, Env: map[string]string{"DATABASE_URL": env}})
		vm, err := s.BootVM(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.CreateSnapshot(ctx, vm.ID)
		if !errors.Is(err, ErrConflict) || !errors.Is(err, secrets.ErrFound) {
			t.Fatalf("%s: snapshot %v, want a conflict naming the secret", name, err)
		}
		if msg := err.Error(); !strings.Contains(msg, `secret "db"`) || !strings.Contains(msg, "memory holds") || strings.Contains(msg, value) {
			t.Errorf("%s: message %q: want the secret and the file named, never the value", name, msg)
		}
		if ids := snapshotIDs(t, s, name); len(ids) != 0 {
			t.Errorf("%s: snapshots %v published", name, ids)
		}
	}
	ents, _ := os.ReadDir(s.snapshotsDir())
	if len(ents) != 0 {
		t.Errorf("left in the snapshots directory: %v", ents)
	}
}

// A copy (or a later push) is scanned for the secrets held at that time.
func TestCopyIsScannedForSecretsSetLater(t *testing.T) {
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	value := "a-value-in-memory-first"
	_, sn := bootAndSnapshotSpec(t, s, FunctionSpec{Name: "app", Env: map[string]string{"TOKEN": value}})
	if _, err := s.CopySnapshot(ctx, sn.ID); err != nil {
		t.Fatalf("copy with no secret: %v", err)
	}
	setSecret(t, s, "token", value)
	if _, err := s.CopySnapshot(ctx, sn.ID); !errors.Is(err, secrets.ErrFound) || !strings.Contains(err.Error(), `"token"`) {
		t.Fatalf("copy holding a secret: %v", err)
	}
	if ids := snapshotIDs(t, s, "app"); len(ids) != 2 {
		t.Errorf("snapshots %v: the refused copy was published", ids)
	}
}

// Prepare's record VMs are restored without secrets: their memory becomes
// the warm snapshot.
func TestPrepareRecordsWithoutSecrets(t *testing.T) {
	_, strategies := testStrategies(nil)
	s, b := fakeService(t, func(c *Config) { c.Strategies = strategies })
	setSecret(t, s, "db", "first-value-0001")
	createSpec(t, s, FunctionSpec{Name: "app", Secrets: map[string]string{"DB_PASSWORD": "db"}})
	if _, err := s.Prepare(context.Background(), PrepareRequest{Function: "app", RecordEvent: json.RawMessage(`1`), GroupSize: 64}); err != nil {
		t.Fatal(err)
	}
	got := b.Secrets()
	if len(got) == 0 {
		t.Fatal("prepare restored nothing")
	}
	for i, m := range got {
		if len(m) != 0 {
			t.Errorf("record restore %d got secrets %v", i, m)
		}
	}
	coldInvoke(t, s, "app") // the warm snapshot's clones do get them
	if got := b.Secrets(); got[len(got)-1]["DB_PASSWORD"] != "first-value-0001" {
		t.Errorf("cold start from the warm snapshot: %v", got[len(got)-1])
	}
}

// Through the registry on the fake VMM and a real MinIO: a push is
// scanned for the pushing node's secrets; the function record carries the
// environment and the references, never a value; a pull needs the
// referenced secrets on the pulling node and is scanned for its own.
func TestRegistryCarriesReferencesNotSecrets(t *testing.T) {
	ctx := context.Background()
	_, withRegistry := signedRegistry(t) // the nodes trust each other's signatures
	a, _ := fakeService(t, withRegistry)
	greeting := "greeting-from-node-a"
	setSecret(t, a, "db", "value-on-node-a-001")
	_, sn := bootAndSnapshotSpec(t, a, FunctionSpec{Name: "fn", Env: map[string]string{"GREETING": greeting},
		Secrets: map[string]string{"DB_PASSWORD": "db"}})
	if _, err := a.PushSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	rec, err := a.reg.Registry().GetFunction(ctx, "fn")
	if err != nil || rec.Env["GREETING"] != greeting || rec.Secrets["DB_PASSWORD"] != "db" {
		t.Fatalf("function record %+v %v", rec, err)
	}
	// A snapshot holding a value that became a secret after it was taken.
	_, leaky := bootAndSnapshotSpec(t, a, FunctionSpec{Name: "leaky", Env: map[string]string{"TOKEN": "became-a-secret-later"}})
	setSecret(t, a, "token", "became-a-secret-later")
	if _, err := a.PushSnapshot(ctx, leaky.ID); !errors.Is(err, secrets.ErrFound) {
		t.Fatalf("push of a snapshot holding a secret: %v", err)
	}
	if _, err := a.reg.Registry().GetFunction(ctx, "leaky"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("the refused push published its function: %v", err)
	}

	b, _ := fakeService(t, withRegistry)
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no secret db") {
		t.Fatalf("pull without the secret: %v", err)
	}
	setSecret(t, b, "db", "value-on-node-b-002")
	setSecret(t, b, "greet", greeting) // node b's own secret is in the snapshot's memory
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"}); !errors.Is(err, secrets.ErrFound) || !strings.Contains(err.Error(), `"greet"`) {
		t.Fatalf("pull of a snapshot holding a secret of this node: %v", err)
	}
	if _, err := b.GetFunction(ctx, "fn"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused pull left its function: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(b.snapshotsDir(), "*")); len(left) != 0 {
		t.Errorf("the refused pull left %v", left)
	}
	if err := b.DeleteSecret(ctx, "greet"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"}); err != nil {
		t.Fatal(err)
	}
	fa, _ := a.GetFunction(ctx, "fn")
	fb, err := b.GetFunction(ctx, "fn")
	if err != nil || fb.Digest != fa.Digest || fb.Env["GREETING"] != greeting || fb.Secrets["DB_PASSWORD"] != "db" {
		t.Fatalf("pulled function %+v (a's digest %s): %v", fb, fa.Digest, err)
	}
}

// Versions carry the environment and the secret references: a deploy
// that changes them publishes a new version, one that leaves them out
// keeps them, a restore of a version delivers that version's secrets,
// and a secret an invocable version references cannot be deleted.
func TestVersionsCarryEnvAndSecrets(t *testing.T) {
	s, b := fakeService(t, func(c *Config) { c.KeepAlive = -1 })
	ctx := context.Background()
	setSecret(t, s, "db", "value-of-db-0001")
	setSecret(t, s, "other", "value-of-other-02")
	deploy := func(env, refs map[string]string) *DeployResult {
		t.Helper()
		res, err := s.Deploy(ctx, DeploySpec{FunctionSpec: FunctionSpec{Name: "app", Env: env, Secrets: refs,
			Archive: bytes.NewReader(archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: "def handle(e): return e\n"}))}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	v1 := deploy(map[string]string{"A": "1"}, map[string]string{"DB": "db"})
	if again := deploy(map[string]string{"A": "1"}, map[string]string{"DB": "db"}); !again.Unchanged || again.Version != v1.Version {
		t.Fatalf("the same deploy: %+v", again)
	}
	v2 := deploy(map[string]string{"A": "1"}, map[string]string{"PASSWORD": "db"})
	if v2.Unchanged || v2.Version == v1.Version {
		t.Fatalf("other secret references, same version: %+v", v2)
	}
	if v3 := deploy(map[string]string{"A": "2"}, map[string]string{"PASSWORD": "db"}); v3.Unchanged {
		t.Fatalf("another environment, same version: %+v", v3)
	}
	if kept := deploy(nil, nil); !kept.Unchanged {
		t.Fatalf("a deploy that leaves the configuration out changed it: %+v", kept)
	}
	coldInvoke(t, s, "app")
	if got := b.Secrets(); got[len(got)-1]["PASSWORD"] != "value-of-db-0001" || len(got[len(got)-1]) != 1 {
		t.Fatalf("the live version's restore set %v", got[len(got)-1])
	}
	inv, err := s.InvokeCold(ctx, ColdRequest{Function: "app:" + fmt.Sprint(v1.Version), InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`)}})
	if err != nil || !inv.OK {
		t.Fatalf("invoke version %d: %v %+v", v1.Version, err, inv)
	}
	if got := b.Secrets(); got[len(got)-1]["DB"] != "value-of-db-0001" {
		t.Fatalf("version %d's restore set %v", v1.Version, got[len(got)-1])
	}
	deploy(map[string]string{"A": "2"}, map[string]string{"X": "other"})
	err = s.DeleteSecret(ctx, "db")
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "app (version 1)") {
		t.Fatalf("delete a secret older versions reference: %v", err)
	}
}
