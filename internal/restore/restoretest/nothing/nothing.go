// Package nothing is a restore strategy that does nothing of its own: it
// maps the snapshot's memory file private, as vanilla does, and reports
// the bytes it mapped. It exists for tests, which link it in and call
// Register: it shows that a strategy is one file and a registration line
// (it passes restoretest.Suite and restores a daemon's cold start).
// Production strategies are listed in package restore's registry.
package nothing

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Kind is the strategy's name.
const Kind restore.Kind = "nothing"

// Stats are what a restore with it reports (its part of the stats).
type Stats struct {
	MappedBytes int64 `json:"mapped_bytes" unit:"bytes" desc:"the memory file mapped, private and copy-on-write"`
}

// Strategy is the strategy, whole.
var Strategy = restore.Strategy{Kind: Kind, Begin: begin, StatsPart: Stats{}}

var (
	once sync.Once
	err  error
)

// Register adds the strategy to package restore's registry (once; later
// calls return the first one's error). Call it before a daemon starts.
func Register() error {
	once.Do(func() { err = restore.Register(Strategy) })
	return err
}

type session struct {
	mem  vmm.Memory
	size int64
}

func begin(_ context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
	path := snap.MemoryPath()
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	// Kept intact from QEMU's discards, with the restore's huge-page
	// choice, as every strategy's memory is.
	mem := vmm.Memory{Path: path, File: vmm.FileUse{KeepIntact: true, HugePages: env.HugePages}}
	return &session{mem: mem, size: fi.Size()}, nil
}

func (s *session) Kind() restore.Kind                 { return Kind }
func (s *session) Memory() vmm.Memory                 { return s.mem }
func (s *session) Untimed() time.Duration             { return 0 }
func (s *session) Started(context.Context, int) error { return nil }
func (s *session) Failed() <-chan error               { return nil }
func (s *session) InvocationDone()                    {}
func (s *session) Close() error                       { return nil }

func (s *session) Stats() restore.Stats {
	b, err := json.Marshal(Stats{MappedBytes: s.size})
	if err != nil {
		return restore.Stats{}
	}
	return restore.Stats{Kind: string(Kind), Part: b}
}
