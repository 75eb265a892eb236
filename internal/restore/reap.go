package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/uffd"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

// REAP records the pages the first invocation faults (userfaultfd) and
// later installs them all from a compact working-set file, read with one
// O_DIRECT read, before the vCPU runs (ASPLOS'21).
const REAP Kind = "reap"

// REAP's artifact files (memlayout.WriteREAP).
const (
	REAPManifest       = "reap.json"
	REAPWorkingSetFile = "ws.bin"
)

// REAPStats: the working-set install and the faults served after it.
type REAPStats = wire.REAPStats

// reap backs guest memory with userfaultfd (registered by the interposer in
// QEMU, which hands the uffd over): the working set is read with one
// O_DIRECT read and installed before the vCPU runs, other faults are served
// from the memory file. In record mode every fault is served and recorded.
type reap struct {
	sessionBase
	snap   Snapshot
	sock   string
	record bool

	ln     *uffd.Listener
	cancel context.CancelFunc
	ready  chan error
	failed chan error
	served chan struct{}

	mu       sync.Mutex
	srv      *uffd.Server
	prefetch uffd.Stats
}

// prefetchTimeout bounds the wait for QEMU's handshake and the prefetch.
const prefetchTimeout = 30 * time.Second

func beginREAP(ctx context.Context, snap Snapshot, env Env) (Session, error) {
	art, ws, err := verifiedArtifact(snap, REAP, memlayout.ReadREAP, REAPWorkingSetFile)
	if err != nil {
		return nil, err
	}
	return startREAP(ctx, snap, env, false, ws, art.PageOrder())
}

// recordREAP is REAP's record phase on the warm snapshot: every page fault
// of one record invocation is served through userfaultfd and recorded in
// order; the pages go to the working-set file.
func recordREAP(ctx context.Context, h RecordHost, p *Prepare) error {
	t := time.Now()
	var rec *reap
	vm, err := h.Restore(ctx, p.Warm, shimmed(func(ctx context.Context, snap Snapshot, env Env) (Session, error) {
		var err error
		rec, err = startREAP(ctx, snap, env, true, "", nil)
		return rec, err
	}))
	if err != nil {
		return err
	}
	err = vm.Invoke(ctx)
	var faulted []uint64
	if err == nil {
		faulted = rec.recordedPages()
	}
	vm.Close()
	if err != nil {
		return err
	}
	p.Touched = faulted
	p.Result.Timing.REAPRecordMS = msOf(time.Since(t))
	t = time.Now()
	dir := p.Warm.ArtifactDir(REAP)
	art, err := memlayout.WriteREAP(dir, p.Warm.MemoryPath(), memSHA(p.Warm), faulted)
	if err != nil {
		return fmt.Errorf("build artifacts: %w", err)
	}
	if err := art.Verify(memSize(p.Warm), memSHA(p.Warm), true); err != nil {
		return fmt.Errorf("verify artifacts: %w", err)
	}
	ws := filepath.Join(dir, REAPWorkingSetFile)
	_ = snapshot.Trust(ws)
	p.Result.REAP = &wire.REAPBuild{FaultedPages: len(faulted)}
	if st, err := os.Stat(ws); err == nil {
		p.Result.REAP.WorkingSetBytes = st.Size()
	}
	p.Result.Timing.REAPBuildMS = msOf(time.Since(t))
	return nil
}

func startREAP(_ context.Context, snap Snapshot, env Env, record bool, wsFile string, pages []uint64) (*reap, error) {
	sock := filepath.Join(env.RunDir, "uffd.sock")
	ln, err := uffd.Listen(sock)
	if err != nil {
		return nil, err
	}
	// The server outlives the request that started the restore: it serves
	// faults until the VM is torn down (Close).
	sctx, cancel := context.WithCancel(context.Background())
	r := &reap{sessionBase: base(env), snap: snap, sock: sock, record: record, ln: ln, cancel: cancel,
		ready: make(chan error, 1), failed: make(chan error, 1), served: make(chan struct{})}
	go r.run(sctx, env, wsFile, pages)
	return r, nil
}

func (r *reap) run(ctx context.Context, env Env, wsFile string, pages []uint64) {
	defer close(r.served)
	actx, cancel := context.WithTimeout(ctx, prefetchTimeout)
	region, err := r.ln.Accept(actx)
	cancel()
	if err != nil {
		r.ready <- fmt.Errorf("userfaultfd handshake: %w", err)
		return
	}
	srv, err := uffd.NewServer(region, r.snap.MemoryPath(), uffd.Options{Record: r.record, Log: env.Log})
	if err != nil {
		region.Close()
		r.ready <- err
		return
	}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	if wsFile != "" {
		st, err := srv.Prefetch(wsFile, pages)
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
	if err := srv.Serve(ctx); err != nil && ctx.Err() == nil {
		r.failed <- fmt.Errorf("userfaultfd server stopped: %w", err)
	}
}

func (r *reap) Kind() Kind { return REAP }

func (r *reap) Memory() vmm.Memory {
	return r.protected(vmm.Memory{Path: r.snap.MemoryPath(), Shared: false, Interposer: vmm.Interposer{
		Mode: vmm.ModeUffd, MemFile: r.snap.MemoryPath(), UffdSock: r.sock}})
}

// Started waits until the working set is installed (the interposer holds
// QEMU until then, so by the time QEMU answers QMP this is already done).
func (r *reap) Started(ctx context.Context, _ int) error {
	select {
	case err := <-r.ready:
		r.ready <- err // later callers see the same answer
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(prefetchTimeout):
		return errors.New("userfaultfd handshake timed out")
	}
}

// Failed delivers the fault server's end while QEMU still needs it.
func (r *reap) Failed() <-chan error { return r.failed }

func (r *reap) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := REAPStats{PrefetchPages: r.prefetch.PrefetchPages, PrefetchBytes: r.prefetch.PrefetchBytes,
		PrefetchMS: msOf(r.prefetch.PrefetchTime), PrefetchDirectIO: r.prefetch.PrefetchDirect}
	var recorded uint64
	if r.srv != nil {
		s := r.srv.Stats()
		rs.FaultsServed, rs.FaultBytesRead = s.Served, s.BytesRead
		if r.record {
			recorded = uint64(len(r.srv.RecordedPages()))
		}
	}
	return Stats{REAPStats: rs, RecordedPageCount: recorded}
}

func (r *reap) recordedPages() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv == nil {
		return nil
	}
	return r.srv.RecordedPages()
}

func (r *reap) Close() error {
	r.cancel()
	r.ln.Close()
	<-r.served
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		return r.srv.Close()
	}
	return nil
}
