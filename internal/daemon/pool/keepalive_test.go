package pool

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// fakeVM is the handle the tests keep: the pools never look inside it.
type fakeVM struct{ id string }

// keepAliveFake records what the keep-alive pool asks of the daemon.
type keepAliveFake struct {
	mu      sync.Mutex
	dead    map[string]bool
	retired map[string]string // id -> why
	labels  []string
}

func newKeepAliveFake() *keepAliveFake {
	return &keepAliveFake{dead: map[string]bool{}, retired: map[string]string{}}
}

func (f *keepAliveFake) deps() KeepAliveDeps[*fakeVM] {
	return KeepAliveDeps[*fakeVM]{
		Live: func(id string) bool { f.mu.Lock(); defer f.mu.Unlock(); return !f.dead[id] },
		Retire: func(vm *fakeVM, rec *catalog.VM, why string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if vm.id != rec.ID {
				panic("retired with another VM's record")
			}
			f.retired[vm.id] = why
		},
		Evicted: func(label string) { f.mu.Lock(); defer f.mu.Unlock(); f.labels = append(f.labels, label) },
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func (f *keepAliveFake) why(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	why, ok := f.retired[id]
	return why, ok
}

func park(t *testing.T, p *KeepAlive[*fakeVM], id string, fn *catalog.Function, snap string) {
	t.Helper()
	if !p.Park(&fakeVM{id}, &catalog.VM{ID: id, Function: fn.Name, State: catalog.StateRunning}, fn, snap) {
		t.Fatalf("vm %s not parked", id)
	}
}

// A function keeps at most MaxIdle VMs; Take hands out the most recently
// used one of the snapshot asked for, skipping dead ones.
func TestKeepAliveParkAndTake(t *testing.T) {
	f := newKeepAliveFake()
	p := NewKeepAlive(KeepAliveConfig{KeepAlive: time.Minute, MaxIdle: 2}, f.deps())
	defer p.Close()
	fn := &catalog.Function{Name: "f"}
	park(t, p, "a", fn, "s1")
	park(t, p, "b", fn, "s1")
	if p.Park(&fakeVM{"c"}, &catalog.VM{ID: "c"}, fn, "s1") {
		t.Fatal("a third idle vm was kept with MaxIdle 2")
	}
	if p.Park(&fakeVM{"d"}, &catalog.VM{ID: "d"}, &catalog.Function{Name: "g", KeepAliveS: -1}, "s2") {
		t.Fatal("a function that opted out had its vm kept")
	}
	if k := p.Take("f", "s2"); k != nil {
		t.Fatalf("took %s for another snapshot", k.Rec.ID)
	}
	f.dead["b"] = true
	if k := p.Take("f", "s1"); k == nil || k.Rec.ID != "a" || k.VM.id != "a" {
		t.Fatalf("took %+v, want a (b is dead)", k)
	}
	if p.Idle() != 0 || p.Take("f", "s1") != nil {
		t.Fatalf("%d idle after both were taken", p.Idle())
	}
	if len(f.labels) != 0 {
		t.Fatalf("taking evicted: %v", f.labels)
	}
}

// An idle VM goes when its keep-alive time is over; Reclaim and pressure
// stop the longest idle first; MarkIdle says until when each is kept.
func TestKeepAliveEvictions(t *testing.T) {
	f := newKeepAliveFake()
	p := NewKeepAlive(KeepAliveConfig{KeepAlive: time.Hour, MaxIdle: 4}, f.deps())
	defer p.Close()
	short := &catalog.Function{Name: "short", KeepAliveS: 1}
	long := &catalog.Function{Name: "long"}
	park(t, p, "old", long, "s")
	time.Sleep(5 * time.Millisecond)
	park(t, p, "new", long, "s")
	park(t, p, "brief", short, "t")
	recs := []*catalog.VM{{ID: "old", State: catalog.StateRunning}, {ID: "brief", State: catalog.StateRunning}, {ID: "other", State: catalog.StateRunning}}
	p.MarkIdle(recs...)
	if d := time.Until(recs[0].IdleUntil); d < 59*time.Minute || d > time.Hour {
		t.Errorf("old idle until %s from now, want the daemon's hour", d)
	}
	if d := time.Until(recs[1].IdleUntil); d <= 0 || d > time.Second {
		t.Errorf("brief idle until %s from now, want its own second", d)
	}
	if !recs[2].IdleUntil.IsZero() {
		t.Errorf("a vm not kept is marked idle")
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, ok := f.why("brief"); !ok && time.Now().Before(deadline); _, ok = f.why("brief") {
		time.Sleep(10 * time.Millisecond)
	}
	if why, _ := f.why("brief"); why != WhyExpired {
		t.Fatalf("brief: retired %q, want %q", why, WhyExpired)
	}
	if !p.Reclaim() {
		t.Fatal("nothing reclaimed with two idle vms")
	}
	if why, _ := f.why("old"); why != WhyRoom {
		t.Fatalf("reclaim stopped %v, want old for room", f.retired)
	}
	p.EvictWhere(func(k *Kept[*fakeVM]) bool { return k.Snapshot == "s" }, "snapshot deleted")
	if p.Idle() != 0 || p.Reclaim() {
		t.Fatalf("%d idle after the snapshot's were evicted", p.Idle())
	}
	want := []string{"expired", "room", "deleted"}
	if len(f.labels) != len(want) || f.labels[0] != want[0] || f.labels[1] != want[1] || f.labels[2] != want[2] {
		t.Fatalf("eviction labels %v, want %v", f.labels, want)
	}
}

// Pressure stops a ready clone first, then idle VMs, and nothing while
// memory is plentiful or unknown.
func TestPressureWatch(t *testing.T) {
	var mu sync.Mutex
	avail, known := 1000, true
	var stopped []string
	stop := make(chan struct{})
	readyLeft := 1
	p := Pressure{Every: 5 * time.Millisecond, MinAvailableMiB: 500,
		Available: func() (int, bool) { mu.Lock(); defer mu.Unlock(); return avail, known },
		Ready: func(why string) bool {
			mu.Lock()
			defer mu.Unlock()
			if readyLeft == 0 {
				return false
			}
			readyLeft--
			stopped = append(stopped, "ready:"+why)
			return true
		},
		Idle: func(why string) bool {
			mu.Lock()
			defer mu.Unlock()
			stopped = append(stopped, "idle:"+why)
			return true
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan struct{})
	go func() { p.Watch(stop); close(done) }()
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	if len(stopped) != 0 {
		t.Errorf("stopped %v with memory to spare", stopped)
	}
	avail, known = 100, false
	mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	if len(stopped) != 0 {
		t.Errorf("stopped %v with memory unknown", stopped)
	}
	known = true
	mu.Unlock()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(stopped)
		mu.Unlock()
		if n >= 2 {
			break
		}
	}
	close(stop)
	<-done
	if len(stopped) < 2 || stopped[0] != "ready:"+WhyPressure || stopped[1] != "idle:"+WhyPressure {
		t.Fatalf("stopped %v, want the ready clone, then an idle vm", stopped)
	}
}
