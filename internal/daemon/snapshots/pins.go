package snapshots

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Pins keep a snapshot's strategy artifacts from being swapped while a
// restore resolves them. A restore holds its snapshot's pin shared from
// the strategy's Begin (which reads and verifies the manifest) until its
// VMM has started with the strategy's files opened and mapped and the
// strategy's Started has run (REAP's working set installed), or until the
// session closes; a working-set refresh holds it exclusively for the swap
// alone. So every restore uses one complete, verified set: the one in
// place when it began.
type Pins struct {
	root  string   // the directory snapshots live in
	locks sync.Map // snapshot directory -> *sync.RWMutex
}

// NewPins makes the pins of the snapshots under root.
func NewPins(root string) *Pins { return &Pins{root: root} }

// StagingPrefix starts the name of the directory beside a snapshot's files
// where a working-set refresh builds a strategy's new artifacts before it
// exchanges them with the artifact directory in one rename.
const StagingPrefix = ".refresh-"

func (p *Pins) of(dir string) *sync.RWMutex {
	l, _ := p.locks.LoadOrStore(dir, new(sync.RWMutex))
	return l.(*sync.RWMutex)
}

// Begin wraps a strategy's begin so the session holds its snapshot's pin
// until Started or Close.
func (p *Pins) Begin(begin restore.BeginFunc) restore.BeginFunc {
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

// Staging is where refresh op builds kind's new artifacts for snapDir.
func (p *Pins) Staging(snapDir string, kind restore.Kind, op string) string {
	return filepath.Join(snapDir, StagingPrefix+string(kind)+"-"+op)
}

// Swap puts the artifacts built in staging in place of kind's in snapDir,
// in one atomic exchange (renameat2 RENAME_EXCHANGE; a plain rename when
// kind had none), while no restore of the snapshot is between Begin and
// Started; the old artifacts, now in staging, are removed. A crash leaves
// either set whole in place and the other in staging, which the next
// start removes.
func (p *Pins) Swap(snapDir string, kind restore.Kind, staging string) error {
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

// Trust records kind's artifact files of snapDir as verified (they were,
// as they were built), so the next restore hashes nothing.
func (p *Pins) Trust(snapDir string, kind restore.Kind) {
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

// RemoveStaging removes what refreshes a stopped daemon left in the
// snapshot directories and says how many directories.
func (p *Pins) RemoveStaging() (int, error) {
	snaps, err := os.ReadDir(p.root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sn := range snaps {
		if !sn.IsDir() {
			continue
		}
		dir := filepath.Join(p.root, sn.Name())
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && len(e.Name()) > len(StagingPrefix) && strings.HasPrefix(e.Name(), StagingPrefix) {
				if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
					return n, err
				}
				n++
			}
		}
	}
	return n, nil
}
