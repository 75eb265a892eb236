package pool

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/polltest"
)

// goUnlessClosed runs fn in the background, counted in wg, unless closed
// (the fakes' Go).
func goUnlessClosed(mu *sync.Mutex, closed *bool, wg *sync.WaitGroup, fn func()) bool {
	mu.Lock()
	defer mu.Unlock()
	if *closed {
		return false
	}
	wg.Add(1)
	go func() { defer wg.Done(); fn() }()
	return true
}

// vmmFake is the daemon as the VMM pool sees it: starts that can be held
// or fail, a room budget, and what was retired or enlisted.
type vmmFake struct {
	mu       sync.Mutex
	n        int
	gate     chan struct{} // if set, each start waits for it
	fail     error
	room     int // VMs admission still admits
	released int
	dead     map[string]bool
	retired  map[string]string
	enlisted []string
	drops    []string
	closed   bool
	wg       sync.WaitGroup
}

func newVMMFake(room int) *vmmFake {
	return &vmmFake{room: room, dead: map[string]bool{}, retired: map[string]string{}}
}

func (f *vmmFake) deps() VMMPoolDeps[*fakeVM, string] {
	return VMMPoolDeps[*fakeVM, string]{
		Start: func(_ context.Context, key Key, release func()) (*fakeVM, *catalog.VM, string, error) {
			f.mu.Lock()
			gate, fail := f.gate, f.fail
			f.n++
			id := key.Snapshot + "-" + string(rune('a'+f.n-1))
			f.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if fail != nil {
				release()
				return nil, nil, "", fail
			}
			return &fakeVM{id}, &catalog.VM{ID: id}, "plan of " + id, nil
		},
		Enlist: func(vm *fakeVM, join func()) {
			f.mu.Lock() // before join, under the pool's lock: in the pool's order
			f.enlisted = append(f.enlisted, vm.id)
			f.mu.Unlock()
			join()
		},
		Retire: func(vm *fakeVM, rec *catalog.VM, why string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.retired[rec.ID] = why
		},
		Live: func(id string) bool { f.mu.Lock(); defer f.mu.Unlock(); return !f.dead[id] },
		Admit: func(string, int, int) (func(), bool) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.room == 0 {
				return nil, false
			}
			f.room--
			return func() { f.mu.Lock(); f.room++; f.released++; f.mu.Unlock() }, true
		},
		Go:      func(fn func()) bool { return goUnlessClosed(&f.mu, &f.closed, &f.wg, fn) },
		Closed:  func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.closed },
		Dropped: func(why string) { f.mu.Lock(); f.drops = append(f.drops, why); f.mu.Unlock() },
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func (f *vmmFake) why(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.retired[id]
}

var vmmCfg = VMMPoolConfig{Size: 2, TTL: time.Minute, MemoryMiB: 1000, OverheadMiB: 50, BootTimeout: 3 * time.Second}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 3*time.Second, what, cond)
}

// A refill starts the function's size of standby VMs within the memory
// budget; Take hands out the oldest live one with its plan; the rest of
// the pool is reclaimed for room.
func TestVMMPoolRefillAndTake(t *testing.T) {
	f := newVMMFake(10)
	p := NewVMMPool(vmmCfg, f.deps())
	defer p.Close()
	key := Key{Snapshot: "s", Kind: "vanilla"}
	fn := &catalog.Function{Name: "f", MemoryMiB: 250}
	p.Refill(key, fn)
	waitUntil(t, "two standby vms", func() bool { return p.Count() == 2 })
	if n, filling, mem := p.Usage(key); n != 2 || filling != 0 || mem != 600 {
		t.Fatalf("usage: %d ready, %d filling, %d MiB; want 2, 0, 600", n, filling, mem)
	}
	p.Refill(Key{Snapshot: "t", Kind: "vanilla"}, fn) // only one more fits the 1000 MiB budget
	waitUntil(t, "the third standby vm", func() bool { return p.Count() == 3 })
	if _, _, mem := p.Usage(key); mem != 900 {
		t.Fatalf("%d MiB held, want 900", mem)
	}
	var oldest string
	waitUntil(t, "all three enlisted", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.enlisted) == 3 {
			oldest = f.enlisted[0]
		}
		return oldest != ""
	})
	first := p.Take(key)
	if first == nil || first.Rec.ID != oldest || first.Plan != "plan of "+first.Rec.ID || first.VM.id != first.Rec.ID {
		t.Fatalf("took %+v, want the oldest (%s) with its plan", first, oldest)
	}
	other := map[string]string{"s-a": "s-b", "s-b": "s-a"}[first.Rec.ID]
	f.mu.Lock()
	f.dead[other] = true // died while waiting: Take skips it, and it leaves the pool
	f.mu.Unlock()
	if sb := p.Take(key); sb != nil {
		t.Fatalf("took the dead %s", sb.Rec.ID)
	}
	if n, _, mem := p.Usage(key); n != 0 || mem != 300 {
		t.Fatalf("after the takes: %d ready, %d MiB; want 0 and the other key's 300", n, mem)
	}
	if !p.Reclaim() || f.why("t-c") != WhyStandbyRoom || p.Reclaim() {
		t.Fatalf("reclaim retired %v", f.retired)
	}
	if opted := (&catalog.Function{VMMPool: -1}); p.Size(opted) != 0 || p.Size(&catalog.Function{VMMPool: 3}) != 3 || p.Size(fn) != 2 {
		t.Fatal("size: a function's own setting is not used")
	}
}

// A standby VM waits its time-to-live; the admission's refusal, a held
// snapshot and a closing daemon stop fills.
func TestVMMPoolExpiryAndRefusals(t *testing.T) {
	f := newVMMFake(1)
	p := NewVMMPool(vmmCfg, f.deps())
	defer p.Close()
	key := Key{Snapshot: "s", Kind: "vanilla"}
	fn := &catalog.Function{Name: "f", MemoryMiB: 100, VMMPoolTTLS: 1}
	p.Refill(key, fn) // admission has room for one
	waitUntil(t, "a standby vm", func() bool { return p.Count() == 1 })
	time.Sleep(20 * time.Millisecond)
	if p.Count() != 1 {
		t.Fatal("a second fill passed admission")
	}
	waitUntil(t, "the expiry", func() bool { return f.why("s-a") == WhyStandbyExpired })
	f.mu.Lock()
	drops := len(f.drops)
	f.mu.Unlock()
	if p.Count() != 0 || drops != 1 {
		t.Fatalf("after expiry: %d standby, %d drops", p.Count(), drops)
	}
	f.mu.Lock()
	f.room = 5 // the retired VM's room comes back through the daemon; here by hand
	f.mu.Unlock()
	p.Hold("s", true)
	p.Refill(key, fn)
	p.Hold("s", false)
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	p.Refill(key, fn)
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n != 1 || f.room != 5 {
		t.Fatalf("held or closing: %d starts, room %d; want no start and the room given back", f.n, f.room)
	}
}

// A fill under way when its snapshot's VMs are dropped is retired once
// started, never pooled, and the drop waits for it; a failed fill gives its
// memory back.
func TestVMMPoolDropDuringFill(t *testing.T) {
	f := newVMMFake(10)
	f.gate = make(chan struct{})
	cfg := vmmCfg
	cfg.Size = 1
	p := NewVMMPool(cfg, f.deps())
	defer p.Close()
	key := Key{Snapshot: "s", Kind: "vanilla"}
	fn := &catalog.Function{Name: "f", MemoryMiB: 100}
	p.Refill(key, fn)
	waitUntil(t, "a fill", func() bool { _, n, _ := p.Usage(key); return n == 1 })
	time.AfterFunc(50*time.Millisecond, func() { close(f.gate) })
	t0 := time.Now()
	p.DropSnapshot("s", nil, WhyStandbyEvict)
	if time.Since(t0) < 50*time.Millisecond {
		t.Error("the drop did not wait for the fill under way")
	}
	if n, filling, mem := p.Usage(key); n != 0 || filling != 0 || mem != 0 || f.why("s-a") == "" {
		t.Fatalf("after the drop: %d ready, %d filling, %d MiB, retired %v", n, filling, mem, f.retired)
	}
	f.mu.Lock()
	f.gate, f.fail = nil, errors.New("no qemu")
	f.mu.Unlock()
	p.Refill(key, fn)
	f.wg.Wait()
	f.mu.Lock()
	enlisted := len(f.enlisted)
	f.mu.Unlock()
	if _, filling, mem := p.Usage(key); filling != 0 || mem != 0 || enlisted != 0 {
		t.Fatalf("after a failed fill: %d filling, %d MiB, %d enlisted", filling, mem, enlisted)
	}
	p.Forget("nothing") // forgetting a VM the pool does not hold is harmless
}
