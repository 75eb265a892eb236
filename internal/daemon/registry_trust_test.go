package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/thaw-dev/thaw/internal/registry/miniotest"
	"github.com/thaw-dev/thaw/internal/signing"
	"github.com/thaw-dev/thaw/wire"
)

// ringSize is how many nodes one keyRing provisions.
const ringSize = 16

// keyRing provisions nodes that trust each other, as an operator would: a
// key made ahead for each node's data directory, and one file listing
// them all that every node names as its trusted keys. Each call of the
// returned edit gives the next node the next key.
func keyRing(t *testing.T) func(*Config) {
	t.Helper()
	dir := t.TempDir()
	var lines []string
	keys := make([][]byte, ringSize)
	for i := range keys {
		p := filepath.Join(dir, "key"+string(rune('a'+i)))
		k, _, err := signing.LoadOrCreateKey(p)
		if err != nil {
			t.Fatal(err)
		}
		if keys[i], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, k.Public().String())
	}
	trusted := filepath.Join(dir, "trusted")
	if err := os.WriteFile(trusted, []byte("# the test's nodes\n"+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	next := 0
	return func(c *Config) {
		mu.Lock()
		defer mu.Unlock()
		c.RegistryTrustedKeys = append(c.RegistryTrustedKeys, trusted)
		if c.DataDir == "" { // a config only validated
			return
		}
		if next == ringSize {
			t.Fatalf("keyRing: more than %d nodes", ringSize)
		}
		if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.DataDir, signing.KeyFileName), keys[next], 0o600); err != nil {
			t.Fatal(err)
		}
		next++
	}
}

// refusedCount reads thaw_registry_refused_total{kind, reason}.
func refusedCount(t *testing.T, s *Service, kind, reason string) float64 {
	t.Helper()
	mfs, err := s.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "thaw_registry_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// tamper is a way of replacing a signed registry object.
type tamper struct {
	name   string
	key    string                   // the object replaced
	bad    func(orig []byte) []byte // its new content
	kind   string
	reason signing.Reason
	target string // the function whose pull or import meets it
	snap   string // the snapshot a pull by id meets it through
}

// Every path a node reads the registry on (pull by function or by id,
// full or lazy, the import an invocation starts) refuses an unsigned
// manifest or function record, one signed by a key the node does not
// trust, one changed after signing, and one moved from another object,
// with a clear error, counted by reason, before any chunk is fetched and
// leaving nothing behind; the refresh keeps the copy an untrusted record
// would replace. The same objects, signed by a trusted other node,
// import and run.
func TestImportRefusesUntrustedRecords(t *testing.T) {
	ctx := context.Background()
	srv := miniotest.Start(t)
	withRegistry := func(c *Config) { cfg := srv.Config; c.Registry = &cfg; c.KeepAlive = -1; c.VMMPool = -1 }
	a, _ := fakeService(t, withRegistry)
	_, sn := bootAndSnapshot(t, a, "fn")
	_, sn2 := bootAndSnapshot(t, a, "fn2")
	for _, id := range []string{sn.ID, sn2.ID} {
		if _, err := a.PushSnapshot(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// b trusts a, given as its public key line (GET /v1/info's).
	aKey := a.Info().RegistryKey
	if aKey == nil || aKey.ID != a.RegistryKey().ID() {
		t.Fatalf("info's registry key %+v", aKey)
	}
	b, _ := fakeService(t, func(c *Config) { withRegistry(c); c.RegistryTrustedKeys = []string{aKey.PublicKey + " node-a"} })
	if got := b.Info().Registry.TrustedKeys; len(got) != 2 || !slices.Contains(got, aKey.ID) || !slices.Contains(got, b.RegistryKey().ID()) {
		t.Fatalf("b trusts %v", got)
	}

	for _, c := range tamperCases(t, srv, sn.ID, sn2.ID) {
		checkTamperRefused(t, srv, b, c)
	}

	// Signed by a trusted other node: it imports and runs.
	pr, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"})
	if err != nil || !pr.FunctionCreated || pr.FetchedChunks == 0 {
		t.Fatalf("pull of a trusted node's snapshot: %v %+v", err, pr)
	}
	inv, err := b.InvokeCold(ctx, ColdRequest{Function: "fn2", Strategy: "cached", InvokeRequest: InvokeRequest{Event: json.RawMessage(`{"x":1}`)}})
	if err != nil || !inv.OK || inv.Timing.ImportMS <= 0 {
		t.Fatalf("import of a trusted node's function: %v %+v", err, inv)
	}

	// Refresh: a newer record of other code b does not trust leaves b's
	// copy alone (the next round, it is refused again).
	c, _ := fakeService(t, withRegistry) // trusted by nobody
	_, v2 := bootAndSnapshotSpec(t, c, FunctionSpec{Name: "fn",
		Archive: bytes.NewReader(tarGz(t, tarEntry{name: "handler.py", body: "def handle(e): return 2\n"}))})
	if _, err := c.PushSnapshot(ctx, v2.ID); err != nil {
		t.Fatal(err)
	}
	counted := refusedCount(t, b, "function", string(signing.UnknownKey))
	if got, err := b.RefreshFunctions(ctx); err != nil || len(got) != 0 {
		t.Fatalf("refresh against an untrusted record replaced %v, %v", got, err)
	}
	if _, err := b.GetFunction(ctx, "fn"); err != nil {
		t.Fatalf("refresh removed the trusted copy: %v", err)
	}
	if refusedCount(t, b, "function", string(signing.UnknownKey)) <= counted {
		t.Fatal("the refresh's refusal was not counted")
	}
}

// tamperCases replace the manifests of snapshots snap (of fn) and snap2
// (of fn2) and the functions' records in srv: unsigned, signed by a key
// nobody trusts, modified after signing, and replayed onto another object.
func tamperCases(t *testing.T, srv *miniotest.Server, snap, snap2 string) []tamper {
	stranger, err := signing.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	payload := func(b []byte) []byte {
		p, err := signing.Payload(b)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	reseal := func(kind, key string) func([]byte) []byte {
		return func(orig []byte) []byte {
			out, err := signing.Seal(stranger, kind, key, payload(orig))
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	modify := func(old, new string) func([]byte) []byte {
		return func(orig []byte) []byte {
			var env signing.Envelope
			if err := json.Unmarshal(orig, &env); err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(env.Payload, []byte(old)) {
				t.Fatalf("payload lacks %q", old)
			}
			env.Payload = bytes.Replace(env.Payload, []byte(old), []byte(new), 1)
			out, _ := json.Marshal(env)
			return out
		}
	}
	copyOf := func(key string) func([]byte) []byte { return func([]byte) []byte { return srv.Get(t, key) } }
	mkey, fkey := "snapshots/"+snap+"/manifest.json", "functions/fn.json"
	mkey2, fkey2 := "snapshots/"+snap2+"/manifest.json", "functions/fn2.json"
	unsigned := func(orig []byte) []byte { return payload(orig) }
	return []tamper{
		{"unsigned manifest", mkey, unsigned, "manifest", signing.Unsigned, "fn", snap},
		{"manifest by an unknown key", mkey, reseal("manifest", mkey), "manifest", signing.UnknownKey, "fn", snap},
		{"manifest modified", mkey, modify(`"memory","size":`, `"memory","size":1`), "manifest", signing.BadSignature, "fn", snap},
		{"manifest replayed onto another snapshot", mkey2, copyOf(mkey), "manifest", signing.WrongObject, "fn2", snap2},
		{"unsigned function record", fkey, unsigned, "function", signing.Unsigned, "fn", snap},
		{"function record by an unknown key", fkey, reseal("function", fkey), "function", signing.UnknownKey, "fn", snap},
		{"function record modified", fkey, modify(`"memory_mib":`, `"memory_mib":1`), "function", signing.BadSignature, "fn", snap},
		{"function record replayed onto another function", fkey2, copyOf(fkey), "function", signing.WrongObject, "fn2", snap2},
	}
}

// checkTamperRefused puts c's bad object in srv and checks that every path
// b reads the registry on refuses it with a clear error, counted by
// reason, before any chunk is fetched and leaving nothing behind; it puts
// the original back.
func checkTamperRefused(t *testing.T, srv *miniotest.Server, b *Service, c tamper) {
	t.Helper()
	ctx := context.Background()
	orig := srv.Get(t, c.key)
	srv.Put(t, c.key, c.bad(orig))
	before, counted := b.ChunkCache().Stats(), refusedCount(t, b, c.kind, string(c.reason))
	for what, try := range map[string]func() error{
		"pull": func() error { _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: c.target}); return err },
		"lazy pull": func() error {
			_, err := b.PullSnapshot(ctx, wire.PullRequest{Function: c.target, Lazy: true})
			return err
		},
		"pull by id": func() error { _, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: c.snap}); return err },
		"import": func() error {
			_, err := b.InvokeCold(ctx, ColdRequest{Function: c.target, Strategy: "vanilla"})
			return err
		},
	} {
		err := try()
		if !errors.Is(err, ErrSnapshotUnusable) || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: %s: %v, want a refusal of %s", c.name, what, err, c.key)
		}
	}
	if after := b.ChunkCache().Stats(); after.FetchedChunks != before.FetchedChunks || after.Hits != before.Hits {
		t.Errorf("%s: chunks were fetched (%d) or looked up (%d)", c.name, after.FetchedChunks-before.FetchedChunks, after.Hits-before.Hits)
	}
	if got := refusedCount(t, b, c.kind, string(c.reason)); got <= counted {
		t.Errorf("%s: thaw_registry_refused_total{kind=%q,reason=%q} stayed %v", c.name, c.kind, c.reason, got)
	}
	fns, _ := b.ListFunctions(ctx)
	snaps, _ := b.ListSnapshots(ctx, "")
	left, _ := filepath.Glob(filepath.Join(b.snapshotsDir(), "*"))
	code, _ := filepath.Glob(filepath.Join(b.functionsDir(), "*"))
	if len(fns)+len(snaps)+len(left)+len(code) != 0 {
		t.Errorf("%s: left functions %d, snapshots %d, files %v %v", c.name, len(fns), len(snaps), left, code)
	}
	srv.Put(t, c.key, orig)
}
