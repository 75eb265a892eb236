package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// artifactPins keep a snapshot's strategy artifacts from being swapped
// while a restore resolves them. A restore holds its snapshot's pin shared
// from the strategy's Begin (which reads and verifies the manifest) until
// its VMM has started with the strategy's files opened and mapped and the
// strategy's Started has run (REAP's working set installed), or until the
// session closes; a working-set refresh holds it exclusively for the swap
// alone. So every restore uses one complete, verified set: the one in
// place when it began.
type artifactPins struct {
	mu sync.Mutex
	m  map[string]*sync.RWMutex
}

func (p *artifactPins) of(dir string) *sync.RWMutex {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*sync.RWMutex{}
	}
	l := p.m[dir]
	if l == nil {
		l = &sync.RWMutex{}
		p.m[dir] = l
	}
	return l
}

// begin wraps a strategy's begin so the session holds its snapshot's pin
// until Started or Close.
func (p *artifactPins) begin(begin restore.BeginFunc) restore.BeginFunc {
	return func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
		l := p.of(snap.Dir)
		l.RLock()
		sess, err := begin(ctx, snap, env)
		if err != nil {
			l.RUnlock()
			return nil, err
		}
		return &pinnedSession{Session: sess, release: sync.OnceFunc(l.RUnlock)}, nil
	}
}

// pinnedSession is a session holding its snapshot's artifact pin.
type pinnedSession struct {
	restore.Session
	release func()
}

func (p *pinnedSession) Started(ctx context.Context, pid int) error {
	defer p.release()
	return p.Session.Started(ctx, pid)
}

func (p *pinnedSession) Close() error {
	p.release()
	return p.Session.Close()
}

// Unwrap is the strategy's own session (restore.MeasureSet).
func (p *pinnedSession) Unwrap() restore.Session { return p.Session }

// Working-set refreshes build the new artifacts of strategy kind of a
// snapshot in a directory beside its files, then exchange it with the
// artifact directory in one rename.
const stagingPrefix = ".refresh-"

// stagingDir is where a refresh builds kind's new artifacts for snapDir.
func stagingDir(snapDir string, kind restore.Kind, op string) string {
	return filepath.Join(snapDir, stagingPrefix+string(kind)+"-"+op)
}

// swapArtifacts puts the artifacts built in staging in place of kind's in
// snapDir, in one atomic exchange (renameat2 RENAME_EXCHANGE; a plain
// rename when kind had none), while no restore of the snapshot is between
// Begin and Started; the old artifacts, now in staging, are removed. A
// crash leaves either set whole in place and the other in staging, which
// the next start removes.
func (p *artifactPins) swapArtifacts(snapDir string, kind restore.Kind, staging string) error {
	cur := filepath.Join(snapDir, "strategies", string(kind))
	if err := os.MkdirAll(filepath.Dir(cur), 0o700); err != nil {
		return err
	}
	if err := snapshot.SyncDir(staging); err != nil {
		return err
	}
	l := p.of(snapDir)
	l.Lock()
	err := unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, cur, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		err = os.Rename(staging, cur)
	}
	l.Unlock()
	if err != nil {
		return fmt.Errorf("swap %s artifacts: %w", kind, err)
	}
	if err := snapshot.SyncDir(filepath.Dir(cur)); err != nil {
		return err
	}
	if err := snapshot.SyncDir(snapDir); err != nil {
		return err
	}
	return os.RemoveAll(staging)
}

// trustArtifacts records kind's artifact files of snapDir as verified
// (they were, as they were built), so the next restore hashes nothing.
func trustArtifacts(snapDir string, kind restore.Kind) {
	dir := filepath.Join(snapDir, "strategies", string(kind))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			_ = snapshot.Trust(filepath.Join(dir, e.Name()))
		}
	}
}

// removeStaging removes what refreshes a stopped daemon left in the
// snapshot directories under root.
func removeStaging(root string) (int, error) {
	snaps, err := os.ReadDir(root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sn := range snaps {
		if !sn.IsDir() {
			continue
		}
		dir := filepath.Join(root, sn.Name())
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && len(e.Name()) > len(stagingPrefix) && e.Name()[:len(stagingPrefix)] == stagingPrefix {
				if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
					return n, err
				}
				n++
			}
		}
	}
	return n, nil
}
