package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/pagemap"
	"github.com/thaw-dev/thaw/internal/uffd"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// prefetchTimeout bounds the wait for QEMU's handshake and the prefetch.
const prefetchTimeout = 30 * time.Second

// uffdPlan is what a userfaultfd-backed restore does: REAP's working set
// installed before the vCPU runs, FaaSnap's loading set installed while it
// runs, faults served from the memory file or a memory source.
type uffdPlan struct {
	kind     Kind
	record   bool           // record every faulted page (REAP's record phase)
	wsFile   string         // REAP: working-set file installed before the ack
	wsPages  []uint64       // its pages, in file order
	wsSource MemorySource   // lazy REAP: the working set streamed from remote instead of wsFile
	lsFile   string         // lazy FaaSnap: loading-set file installed after the ack
	lsRuns   []uffd.FileRun // its runs, in file (group) order
	lsSource MemorySource   // lazy FaaSnap: the loading set streamed from remote instead of lsFile
	source   *pageSource    // nil: faults read the snapshot's memory file
	fallback string         // why this restore runs as vanilla
	entries  int            // lazy FaaSnap: loading-set regions (reported as layout entries)
}

// uffdSession backs guest memory with userfaultfd (registered by the
// interposer in QEMU, which hands the uffd over) and serves its faults
// until the VM is torn down.
type uffdSession struct {
	sessionBase
	snap Snapshot
	sock string
	plan uffdPlan

	ln     *uffd.Listener
	cancel context.CancelFunc
	ready  chan error
	failed chan error
	served chan struct{}

	mu            sync.Mutex
	region        *uffd.Mapping
	srv           *uffd.Server
	prefetch      uffd.Stats
	loadDone      chan struct{} // closed when the loader returns (lazy FaaSnap)
	loading       bool          // the loader was started
	loadMS        float64
	finishedFirst *bool
	cleared       bool // Started cleared the VMM's referenced bits (MeasureSet)
	log           *slog.Logger
}

func startUffd(snap Snapshot, env Env, plan uffdPlan) (*uffdSession, error) {
	sock := filepath.Join(env.RunDir, "uffd.sock")
	ln, err := uffd.Listen(sock)
	if err != nil {
		return nil, err
	}
	// The server outlives the request that started the restore: it serves
	// faults until the VM is torn down (Close).
	sctx, cancel := context.WithCancel(context.Background())
	r := &uffdSession{sessionBase: base(env), snap: snap, sock: sock, plan: plan, ln: ln, cancel: cancel, log: env.Log,
		ready: make(chan error, 1), failed: make(chan error, 1), served: make(chan struct{})}
	if plan.lsFile != "" {
		r.loadDone = make(chan struct{})
	}
	go r.run(sctx, env)
	return r, nil
}

// newServer makes the fault server: from the memory source if there is
// one, else from the memory file.
func (r *uffdSession) newServer(region *uffd.Mapping, env Env) (*uffd.Server, error) {
	opts := uffd.Options{Record: r.plan.record, Log: env.Log}
	if r.plan.source != nil {
		return uffd.NewSourceServer(region, r.plan.source, opts)
	}
	return uffd.NewServer(region, r.snap.MemoryPath(), opts)
}

func (r *uffdSession) run(ctx context.Context, env Env) {
	defer close(r.served)
	actx, cancel := context.WithTimeout(ctx, prefetchTimeout)
	region, err := r.ln.Accept(actx)
	cancel()
	if err != nil {
		r.ready <- fmt.Errorf("userfaultfd handshake: %w", err)
		return
	}
	srv, err := r.newServer(region, env)
	if err != nil {
		region.Close()
		r.ready <- err
		return
	}
	r.mu.Lock()
	r.region, r.srv = region, srv
	r.mu.Unlock()
	if r.plan.wsFile != "" {
		var st uffd.Stats
		if r.plan.wsSource != nil {
			st, err = srv.PrefetchFrom(r.plan.wsSource, r.plan.wsFile, r.plan.wsPages)
		} else {
			st, err = srv.Prefetch(r.plan.wsFile, r.plan.wsPages)
		}
		if err != nil {
			region.Close() // QEMU's interposer sees the socket close and fails at once
			r.ready <- fmt.Errorf("prefetch working set: %w", err)
			return
		}
		r.mu.Lock()
		r.prefetch = st
		r.mu.Unlock()
	}
	if err := region.Ack(); err != nil {
		region.Close()
		r.ready <- fmt.Errorf("userfaultfd ack: %w", err)
		return
	}
	r.ready <- nil
	if r.plan.lsFile != "" {
		r.mu.Lock()
		r.loading = true
		r.mu.Unlock()
		go r.load(ctx, srv, env)
	}
	if err := srv.Serve(ctx); err != nil && ctx.Err() == nil {
		r.failed <- fmt.Errorf("userfaultfd server stopped: %w", err)
	}
}

// load installs the loading set while the guest runs (FaaSnap's
// concurrent paging). A failure leaves the pages to the fault server.
func (r *uffdSession) load(ctx context.Context, srv *uffd.Server, env Env) {
	defer close(r.loadDone)
	var st uffd.Stats
	var err error
	if r.plan.lsSource != nil {
		st, err = srv.LoadFrom(ctx, r.plan.lsSource, r.plan.lsFile, r.plan.lsRuns)
	} else {
		st, err = srv.Load(ctx, r.plan.lsFile, r.plan.lsRuns)
	}
	r.mu.Lock()
	r.loadMS = msOf(st.LoadTime)
	r.mu.Unlock()
	if err != nil && ctx.Err() == nil && !errors.Is(err, uffd.ErrClosed) && env.Log != nil {
		env.Log.Warn("loading set not installed; faults serve it", "snapshot", r.snap.Dir, "err", err)
	}
}

func (r *uffdSession) Kind() Kind { return r.plan.kind }

func (r *uffdSession) Memory() vmm.Memory {
	return r.protected(vmm.Memory{Path: r.snap.MemoryPath(), Shared: false,
		Backing: vmm.Backing{Kind: vmm.BackedByUffd, UffdSocket: r.sock}})
}

// Started waits until the working set is installed (the interposer holds
// QEMU until then, so by the time QEMU answers QMP this is already done).
func (r *uffdSession) Started(ctx context.Context, pid int) error {
	select {
	case err := <-r.ready:
		r.ready <- err // later callers see the same answer
		if err == nil && r.measures() {
			// The working set is installed, the vCPU has not run: from
			// now on, a referenced page is one the guest touched.
			t := time.Now()
			cerr := pagemap.ClearReferenced(pid)
			r.mu.Lock()
			r.cleared = cerr == nil
			r.mu.Unlock()
			if r.log != nil {
				r.log.Debug("referenced bits cleared for the set's use", "pid", pid, "ms", msOf(time.Since(t)), "err", cerr)
			}
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(prefetchTimeout):
		return errors.New("userfaultfd handshake timed out")
	}
}

// Failed delivers the fault server's end while QEMU still needs it (a
// memory source that failed, say).
func (r *uffdSession) Failed() <-chan error { return r.failed }

// InvocationDone notes whether the loader finished before the answer.
func (r *uffdSession) InvocationDone() {
	if r.loadDone == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finishedFirst == nil {
		done := false
		select {
		case <-r.loadDone:
			done = true
		default:
		}
		r.finishedFirst = &done
	}
}

func (r *uffdSession) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var st Stats
	var srv uffd.Stats
	if r.srv != nil {
		srv = r.srv.Stats()
	}
	if r.plan.record && r.srv != nil {
		st.RecordedPageCount = uint64(len(r.srv.RecordedPages()))
	}
	if r.plan.lsFile != "" {
		st.LayoutEntries = r.plan.entries
		st.LoaderPages, st.LoaderExisting = srv.LoadPages, srv.LoadExisting
	}
	if r.plan.source != nil {
		r.plan.source.stats(&st.LazyStats)
		st.ParkedFaults, st.ParkedMS = srv.Parked, msOf(srv.ParkTime)
	}
	st.Fallback = r.plan.fallback
	switch {
	case r.plan.kind == REAP:
		st.DaemonReadBytes, st.ServedFaults = r.prefetch.PrefetchBytes+srv.BytesRead, srv.Served
		st.FetchMS, st.FetchBytes = msOf(r.prefetch.PrefetchTime), r.prefetch.PrefetchBytes
		st = withPart(st, REAP, REAPStats{PrefetchPages: r.prefetch.PrefetchPages, PrefetchBytes: r.prefetch.PrefetchBytes,
			PrefetchMS: msOf(r.prefetch.PrefetchTime), PrefetchDirectIO: r.prefetch.PrefetchDirect,
			FaultsServed: srv.Served, FaultBytesRead: srv.BytesRead})
	case r.plan.lsFile != "":
		st.DaemonReadBytes, st.FetchMS, st.FetchBytes = srv.LoadBytes, r.loadMS, srv.LoadBytes
		st = withPart(st, r.plan.kind, FaaSnapStats{LoaderBytes: srv.LoadBytes, LoaderMS: r.loadMS, LoaderBeforeInvoke: r.finishedFirst})
	}
	return st
}

func (r *uffdSession) recordedPages() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv == nil {
		return nil
	}
	return r.srv.RecordedPages()
}

func (r *uffdSession) Close() error {
	r.cancel()
	r.ln.Close()
	<-r.served
	r.mu.Lock()
	loading := r.loading
	r.mu.Unlock()
	if loading {
		<-r.loadDone
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.plan.source.close()
	if r.srv == nil {
		return nil
	}
	err := r.srv.Close()
	// The VM is gone: its userfaultfd goes too (it used to stay open).
	if cerr := r.region.Close(); err == nil {
		err = cerr
	}
	return err
}
