package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/signing"
)

// reopen is a store on e's bucket with trust t, and a chunk cache of its
// own (so what it fetches is counted apart).
func reopen(t *testing.T, e *env, tr registry.Trust) (*registry.Store, *registry.Cache) {
	t.Helper()
	st, err := registry.Open(e.store.Config())
	if err != nil {
		t.Fatal(err)
	}
	st = st.WithTrust(tr)
	return st, newCache(t, st, 0)
}

// envelopeOf decodes the envelope stored at key.
func envelopeOf(t *testing.T, e *env, key string) signing.Envelope {
	t.Helper()
	var env signing.Envelope
	if err := json.Unmarshal(e.get(t, key), &env); err != nil {
		t.Fatal(err)
	}
	return env
}

func putEnvelope(t *testing.T, e *env, key string, env signing.Envelope) {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	e.put(t, key, b)
}

// refusals records what a store's Trust.Refused is told.
type refusals struct {
	mu  sync.Mutex
	got []string // "kind object reason"
}

func (r *refusals) note(kind, object string, ref *signing.Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, kind+" "+object+" "+string(ref.Reason))
}

// A node reads a manifest or function record only when a key it trusts
// signed it for that very object: unsigned, unknown-key, modified and
// moved records are each refused with their reason, before any chunk or
// code archive is fetched, and reported; the same records from a trusted
// node read fine.
func TestRecordsRefusedUnlessTrusted(t *testing.T) { eachStore(t, testRecordsRefusedUnlessTrusted) }

func testRecordsRefusedUnlessTrusted(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0) // node A: pushes, signed with e.key
	fx, _, _ := pushNew(t, e, "snap-a")
	pushRecord(t, e, fx.id, "code")
	ctx := context.Background()

	// B trusts A: the records read, the snapshot pulls.
	b, bc := reopen(t, e, trusting(newKey(t), e.key.Public()))
	if _, err := b.GetManifest(ctx, fx.id); err != nil {
		t.Fatalf("manifest signed by a trusted node: %v", err)
	}
	if r, err := b.GetFunction(ctx, "hello"); err != nil || r.Latest != fx.id {
		t.Fatalf("record signed by a trusted node: %+v %v", r, err)
	}

	// C trusts only itself.
	var seen refusals
	trC := trusting(newKey(t))
	trC.Refused = seen.note
	c, cc := reopen(t, e, trC)
	mkey, fkey := "snapshots/snap-a/manifest.json", "functions/hello.json"
	if _, err := c.GetManifest(ctx, fx.id); !errors.Is(err, registry.ErrUntrusted) || !strings.Contains(err.Error(), e.key.Public().ID()) {
		t.Fatalf("manifest by an unknown key: %v", err)
	}
	if _, err := c.GetFunction(ctx, "hello"); !errors.Is(err, registry.ErrUntrusted) {
		t.Fatalf("record by an unknown key: %v", err)
	}

	checkTamperedRefused(t, e, b, fx.id, mkey, fkey)
	origM, origF := e.get(t, mkey), e.get(t, fkey)

	// Replay: a valid manifest and record copied to other objects.
	fx2, _, _ := pushNew(t, e, "snap-b")
	e.put(t, "snapshots/snap-b/manifest.json", origM)
	e.put(t, "functions/other.json", origF)
	var ref *signing.Refusal
	if _, err := b.GetManifest(ctx, fx2.id); !errors.As(err, &ref) || ref.Reason != signing.WrongObject || !strings.Contains(err.Error(), mkey) {
		t.Errorf("manifest replayed onto another snapshot: %v", err)
	}
	if _, err := b.GetFunction(ctx, "other"); !errors.As(err, &ref) || ref.Reason != signing.WrongObject {
		t.Errorf("record replayed onto another function: %v", err)
	}
	for _, cache := range []*registry.Cache{bc, cc} {
		if st := cache.Stats(); st.FetchedChunks != 0 {
			t.Errorf("a refused record let %d chunks be fetched", st.FetchedChunks)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if want := []string{"manifest " + mkey + " unknown_key", "function " + fkey + " unknown_key"}; strings.Join(seen.got, ";") != strings.Join(want, ";") {
		t.Errorf("refusals reported: %q, want %q", seen.got, want)
	}
}

// checkTamperedRefused checks that b refuses the manifest of snapshot id
// (at mkey) and the function record (at fkey) when they are unsigned,
// modified after signing, or modified and signed by another key; it puts
// the originals back.
func checkTamperedRefused(t *testing.T, e *env, b *registry.Store, id, mkey, fkey string) {
	t.Helper()
	ctx := context.Background()
	origM, origF := e.get(t, mkey), e.get(t, fkey)
	envM, envF := envelopeOf(t, e, mkey), envelopeOf(t, e, fkey)
	// Modified after signing: one chunk digest of the manifest, the code
	// digest of the record (what an attacker would change).
	modM, modF := envM, envF
	modM.Payload = bytes.Replace(envM.Payload, []byte(`"i":0,"sha256":"`), []byte(`"i":0,"sha256":"0`), 1)
	modF.Payload = bytes.Replace(envF.Payload, []byte(`"code_sha256":"`), []byte(`"code_sha256":"0`), 1)
	if bytes.Equal(modM.Payload, envM.Payload) || bytes.Equal(modF.Payload, envF.Payload) {
		t.Fatal("test did not modify the payloads")
	}
	for _, c := range []struct {
		name       string
		setM, setF func()
		want       signing.Reason
	}{
		{"unsigned", func() { e.put(t, mkey, envM.Payload) }, func() { e.put(t, fkey, envF.Payload) }, signing.Unsigned},
		{"modified", func() { putEnvelope(t, e, mkey, modM) }, func() { putEnvelope(t, e, fkey, modF) }, signing.BadSignature},
		{"modified, signature of another key", func() {
			forged, _ := signing.Seal(newKey(t), registry.KindManifest, mkey, modM.Payload)
			e.put(t, mkey, forged)
		}, func() {
			forged, _ := signing.Seal(newKey(t), registry.KindFunction, fkey, modF.Payload)
			e.put(t, fkey, forged)
		}, signing.UnknownKey},
	} {
		c.setM()
		c.setF()
		for _, get := range []func() error{
			func() error { _, err := b.GetManifest(ctx, id); return err },
			func() error { _, err := b.GetFunction(ctx, "hello"); return err },
		} {
			err := get()
			var ref *signing.Refusal
			if !errors.As(err, &ref) || ref.Reason != c.want || !errors.Is(err, registry.ErrUntrusted) {
				t.Errorf("%s: %v, want a refusal for %s", c.name, err, c.want)
			}
		}
		e.put(t, mkey, origM)
		e.put(t, fkey, origF)
	}
}

// A store without a signing key uploads nothing: no chunk, no manifest,
// no record.
func TestPushNeedsASigningKey(t *testing.T) {
	e := newEnv(t, 0)
	st, _ := reopen(t, e, registry.Trust{Keys: signing.NewKeyring(e.key.Public())})
	fx := makeSnapshot(t, e.root, "snap-n", baseRegions())
	if _, _, err := st.Push(context.Background(), fx.dir, registry.PushInfo{}, nil); !errors.Is(err, registry.ErrNoKey) {
		t.Fatalf("push without a key: %v", err)
	}
	rec := registry.FunctionRecord{Name: "hello", Digest: strings.Repeat("d", 64), Latest: "snap-n"}
	if err := st.PushFunction(context.Background(), rec, []byte("code")); !errors.Is(err, registry.ErrNoKey) {
		t.Fatalf("record without a key: %v", err)
	}
	if n := e.count(t, ""); n != 0 {
		t.Fatalf("%d objects written", n)
	}
}

// Garbage collection counts the references of every manifest and record,
// trusted or not (deleting is the dangerous direction), listing shows a
// refused manifest with its reason and never as a function's latest, and
// delete removes it.
func TestUntrustedManifestsListedKeptAndDeletable(t *testing.T) {
	eachStore(t, testUntrustedManifestsListedKeptAndDeletable)
}

func testUntrustedManifestsListedKeptAndDeletable(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	pushNew(t, e, "snap-a")
	pushRecord(t, e, "snap-a", "code")
	other, _ := reopen(t, e, trusting(newKey(t))) // a node e does not trust
	fx := makeSnapshot(t, e.root, "snap-x", append(baseRegions(), region{40 * cs, cs, 77}))
	if _, _, err := other.Push(context.Background(), fx.dir, registry.PushInfo{}, nil); err != nil {
		t.Fatal(err)
	}
	chunks := e.count(t, "chunks/")
	st := gc(t, e, registry.GCOptions{})
	if st.Snapshots != 2 || st.ChunksDeleted != 0 || e.count(t, "chunks/") != chunks {
		t.Fatalf("gc beside an untrusted manifest: %+v", st)
	}
	list, err := e.store.ListSnapshots(context.Background())
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	for _, l := range list {
		switch l.ID {
		case "snap-a":
			if l.Refused != nil || !l.Latest {
				t.Errorf("trusted snap-a listed as %+v", l.Refused)
			}
		case "snap-x":
			if l.Refused == nil || l.Refused.Reason != signing.UnknownKey || l.Latest {
				t.Errorf("untrusted snap-x listed as refused=%v latest=%v", l.Refused, l.Latest)
			}
		}
	}
	if err := e.store.DeleteSnapshot(context.Background(), "snap-x"); err != nil {
		t.Fatalf("delete of an untrusted manifest: %v", err)
	}
	if st := gc(t, e, registry.GCOptions{}); st.ChunksDeleted != 2 {
		t.Fatalf("gc after deleting it: %+v, want its own two chunks (a memory chunk, its manifest.json) deleted", st)
	}
	if r, err := e.store.GetFunction(context.Background(), "hello"); err != nil || r.Latest != "snap-a" {
		t.Fatalf("record: %+v %v", r, err)
	}
}
