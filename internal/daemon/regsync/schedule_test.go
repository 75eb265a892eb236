package regsync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// Run collects the registry on its interval until stop is closed, and
// returns then; without a registry it returns at once.
func TestRunCollectsUntilStopped(t *testing.T) {
	n := newNode(t, registryDir(t))
	n.cfg.GCInterval = 10 * time.Millisecond
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { n.Run(stop); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(n.rec.get(&n.rec.gc)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("collections counted: %v", n.rec.get(&n.rec.gc))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after stop")
	}

	none := newNode(t, "")
	none.cfg.GCInterval = time.Millisecond
	ret := make(chan struct{})
	go func() { none.Run(make(chan struct{})); close(ret) }()
	select {
	case <-ret:
	case <-time.After(5 * time.Second):
		t.Fatal("Run without a registry did not return")
	}
}

// every runs fn again and again on its interval; closing stop cancels
// the run under way and ends it.
func TestEveryCancelsOnStop(t *testing.T) {
	stop, done, canceled := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	go func() {
		every(stop, 10*time.Millisecond, func(ctx context.Context) {
			if runs.Add(1) == 3 {
				<-ctx.Done()
				close(canceled)
			}
		})
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs", runs.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("the run under way was not canceled")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("every did not return after stop")
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("%d runs after stop, want 3", n)
	}
}

// AutoPush pushes only on a node configured to push on prepare.
func TestAutoPush(t *testing.T) {
	ctx := context.Background()
	reg := registryDir(t)
	n := newNode(t, reg)
	fn := &catalog.Function{Name: "hello", Digest: digestOf("hello"), MemoryMiB: 4, CreatedAt: time.Now()}
	sn := n.addSnapshot(t, snapID, fn, time.Now())
	n.AutoPush(ctx, sn.ID)
	if got, err := n.ListRegistrySnapshots(ctx); err != nil || len(got) != 0 {
		t.Fatalf("pushed without PushOnPrepare: %v, %v", got, err)
	}
	n.cfg.PushOnPrepare = true
	n.AutoPush(ctx, sn.ID)
	if got, err := n.ListRegistrySnapshots(ctx); err != nil || len(got) != 1 || got[0].ID != snapID {
		t.Fatalf("registry after an auto push: %+v, %v", got, err)
	}
}

// A function's gate is one lock, apart from other functions'.
func TestGate(t *testing.T) {
	n := newNode(t, "")
	if n.Gate("a") != n.Gate("a") || n.Gate("a") == n.Gate("b") {
		t.Fatal("gates are not one per function")
	}
	n.Gate("a").Lock()
	if !n.Gate("b").TryLock() || n.Gate("a").TryRLock() {
		t.Fatal("a function's gate held another's")
	}
}
