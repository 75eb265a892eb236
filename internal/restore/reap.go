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
	"github.com/thaw-dev/thaw/internal/uffd"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// reap restores with REAP (ASPLOS'21): guest memory is anonymous memory
// registered with userfaultfd by the interposer in QEMU, which hands the
// uffd to the daemon. Before the vCPU runs, the daemon reads the whole
// working-set file with one O_DIRECT read and installs every page with
// UFFDIO_COPY; every other fault is served on demand from the memory file
// in user space. thaw differs from vHive's REAP only in where the uffd comes
// from (an interposer in QEMU instead of Firecracker's own uffd backend).
//
// In record mode (the prepare phase) nothing is prefetched: every fault is
// served from the memory file and recorded in order.
type reap struct {
	snap   Snapshot
	sock   string
	record bool

	ln     *uffd.Listener
	cancel context.CancelFunc
	ready  chan error
	served chan struct{}

	mu       sync.Mutex
	srv      *uffd.Server
	prefetch uffd.Stats
}

// prefetchTimeout bounds the wait for QEMU's handshake and the prefetch.
const prefetchTimeout = 30 * time.Second

func beginREAP(ctx context.Context, snap Snapshot, env Env) (Session, error) {
	dir := snap.ArtifactDir(REAP)
	art, err := memlayout.ReadREAP(dir)
	if err != nil {
		return nil, err
	}
	ws := filepath.Join(dir, REAPWorkingSetFile)
	if err := verifyArtifact(ws, func(full bool) error {
		return art.Verify(memSize(snap), memSHA(snap), full)
	}); err != nil {
		return nil, err
	}
	return startREAP(ctx, snap, env, false, ws, art.PageOrder())
}

// BeginREAPRecord restores snap with every page fault served through
// userfaultfd and recorded (REAP's record phase). RecordedPages returns
// them once the invocation is over.
func BeginREAPRecord(ctx context.Context, snap Snapshot, env Env) (Session, error) {
	return startREAP(ctx, snap, env, true, "", nil)
}

// RecordedPages is implemented by record-mode sessions.
type RecordedPages interface{ RecordedPages() []uint64 }

func startREAP(_ context.Context, snap Snapshot, env Env, record bool, wsFile string, pages []uint64) (*reap, error) {
	if env.ShimPath == "" {
		return nil, errors.New("the userfaultfd interposer (libthaw_shim.so) is not available")
	}
	if _, err := os.Stat(env.ShimPath); err != nil {
		return nil, fmt.Errorf("interposer: %w", err)
	}
	sock := filepath.Join(env.RunDir, "uffd.sock")
	ln, err := uffd.Listen(sock)
	if err != nil {
		return nil, err
	}
	// The server outlives the request that started the restore: it serves
	// faults until the VM is torn down (Close).
	sctx, cancel := context.WithCancel(context.Background())
	r := &reap{snap: snap, sock: sock, record: record, ln: ln, cancel: cancel,
		ready: make(chan error, 1), served: make(chan struct{})}
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
	if err := srv.Serve(ctx); err != nil && ctx.Err() == nil && env.OnFailure != nil {
		env.OnFailure(fmt.Errorf("userfaultfd server stopped: %w", err))
	}
}

func (r *reap) Kind() Kind { return REAP }

func (r *reap) Memory() vmm.Memory {
	return vmm.Memory{Path: r.snap.MemoryPath(), Shared: false, Interposer: vmm.Interposer{
		Mode: vmm.ModeUffd, MemFile: r.snap.MemoryPath(), UffdSock: r.sock}}
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

func (r *reap) InvocationDone() {}

func (r *reap) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Stats{PrefetchPages: r.prefetch.PrefetchPages, PrefetchBytes: r.prefetch.PrefetchBytes,
		PrefetchMS: float64(r.prefetch.PrefetchTime.Microseconds()) / 1000, PrefetchDirectIO: r.prefetch.PrefetchDirect}
	if r.srv != nil {
		s := r.srv.Stats()
		st.FaultsServed, st.FaultBytesRead = s.Served, s.BytesRead
		if r.record {
			st.RecordedPageCount = uint64(len(r.srv.RecordedPages()))
		}
	}
	return st
}

func (r *reap) RecordedPages() []uint64 {
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
