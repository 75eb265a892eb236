package restore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStrictRefusesFallback: with Env.Strict a strategy whose artifacts
// are unusable does not run as vanilla: Begin fails with
// ErrFallbackRefused, naming the strategy, the snapshot and the cause;
// usable artifacts restore as before.
func TestStrictRefusesFallback(t *testing.T) {
	s := newSynth(t, 300, 5)
	env := func() Env {
		return Env{RunDir: t.TempDir(), Loaders: NewLoaders(),
			Store: s.store, Strict: true}
	}
	sess, err := Begin(context.Background(), Premap, s.snap, env())
	if err != nil {
		t.Fatalf("strict premap of a stored snapshot: %v", err)
	}
	if sess.Kind() != Premap || sess.Stats().Fallback != "" {
		t.Errorf("strict premap ran as %s, fallback %q", sess.Kind(), sess.Stats().Fallback)
	}
	sess.Close()

	if err := s.store.Remove(s.snap.Manifest.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.snap.ArtifactDir(FaaSnap), FaaSnapManifest)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []Kind{Premap, FaaSnap} {
		sess, err := Begin(context.Background(), k, s.snap, env())
		if err == nil {
			sess.Close()
			t.Fatalf("strict %s without artifacts began (as %s, fallback %q)", k, sess.Kind(), sess.Stats().Fallback)
		}
		var fe *FallbackRefusedError
		if !errors.Is(err, ErrFallbackRefused) || !errors.As(err, &fe) || fe.Kind != k {
			t.Fatalf("strict %s: %v, want a FallbackRefusedError", k, err)
		}
		if msg := err.Error(); !strings.Contains(msg, string(k)+" cannot restore "+s.snap.Manifest.ID) || !strings.Contains(msg, "fall back to vanilla") {
			t.Errorf("strict %s: message %q", k, msg)
		}
	}
	// Not strict: the same restore runs as vanilla and says why.
	e := env()
	e.Strict = false
	beginFallback(t, Premap, s.snap, e, "premap").Close()
}
