package deps

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Options configure a Manager.
type Options struct {
	Dir       string   // <data-dir>/deps: wheels/, layers/, tmp/
	Python    string   // host interpreter for pip and the precompilation ("python3")
	IndexURL  string   // "" PyPI; NoIndex: find-links only
	FindLinks []string // directories or URLs of wheels
	Format    Format   // "" FormatErofs
	// Compression of erofs layers: "" or "none" (the default), "lz4",
	// "lz4hc": a knob for measurements, not part of a layer's digest, so one
	// node must not mix them.
	Compression string
	Timeout     time.Duration
	Retries     int
	// Budget bounds the bytes of wheels and of layers nothing uses (0:
	// keep none of those; negative: no bound). Layers in use are kept
	// whatever it says.
	Budget int64
	Limits Limits // zero: DefaultLimits
}

// Manager is a node's dependency machinery: the resolver, the wheel cache
// and the layer store, under one directory.
type Manager struct {
	Resolver *Resolver
	Layers   *Layers
	Wheels   *WheelCache
	budget   int64
	tmp      string
	// Work that puts wheels or layers in place before anything records
	// their use (between Begin and its end) and a collection exclude each
	// other: a collection does not start while such work runs (ErrBusy),
	// and such work waits for a running collection.
	mu         sync.Mutex
	idle       *sync.Cond
	working    int
	collecting bool
}

// ErrBusy: a collection found work in progress and did nothing.
var ErrBusy = errors.New("dependency cache busy")

// Begin marks work that adds wheels or layers (a create, a pull) until
// end is called: no collection runs meanwhile, so nothing is removed
// between its download or build and the record that uses it. Begin may be
// called again inside such work.
func (m *Manager) Begin() (end func()) {
	m.mu.Lock()
	for m.collecting {
		m.idle.Wait()
	}
	m.working++
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			m.working--
			m.mu.Unlock()
		})
	}
}

// Open opens the directory, removing what an interrupted build or
// download left.
func Open(o Options) (*Manager, error) {
	if o.Dir == "" || o.Python == "" {
		return nil, fmt.Errorf("deps: a directory and a python are required")
	}
	if o.Format == "" {
		o.Format = FormatErofs
	}
	if _, err := ParseFormat(string(o.Format)); err != nil {
		return nil, err
	}
	if o.Limits == (Limits{}) {
		o.Limits = DefaultLimits
	}
	layersDir, tmp := filepath.Join(o.Dir, "layers"), filepath.Join(o.Dir, "tmp")
	for _, d := range []string{o.Dir, layersDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("deps: %w", err)
		}
	}
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("deps: %w", err)
	}
	wheels, err := OpenWheelCache(filepath.Join(o.Dir, "wheels"))
	if err != nil {
		return nil, err
	}
	for _, d := range []string{layersDir, wheels.Dir()} {
		if err := removeTemps(d); err != nil {
			return nil, err
		}
	}
	retries := o.Retries
	if retries < 0 {
		retries = 0
	}
	m := &Manager{Wheels: wheels, budget: o.Budget, tmp: tmp,
		Resolver: &Resolver{Python: o.Python, IndexURL: o.IndexURL, FindLinks: o.FindLinks, Timeout: o.Timeout,
			Retries: retries, Cache: wheels, TmpDir: tmp},
		Layers: &Layers{dir: layersDir, wheels: wheels, python: o.Python, format: o.Format, compression: o.Compression, limits: o.Limits,
			building: map[string]*sync.Mutex{}}}
	m.idle = sync.NewCond(&m.mu)
	return m, nil
}

func removeTemps(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// Prepare is the whole path from a requirements.txt to its layer: parse,
// resolve (Resolver.Resolve) and build (Layers.Build). Call it between
// Begin and its end, which comes once the layer's use is recorded.
func (m *Manager) Prepare(ctx context.Context, requirements []byte) (Requirements, *Layer, bool, error) {
	reqs, err := ParseRequirements(requirements)
	if err != nil {
		return nil, nil, false, err
	}
	lock, err := m.Resolver.Resolve(ctx, reqs)
	if err != nil {
		return reqs, nil, false, err
	}
	l, built, err := m.Layers.Build(ctx, lock)
	return reqs, l, built, err
}

// CollectStats says what a collection removed and what is left.
type CollectStats struct {
	Layers       int   `json:"layers"`        // removed
	Wheels       int   `json:"wheels"`        // removed
	FreedBytes   int64 `json:"freed_bytes"`   // by the removals
	UsedBytes    int64 `json:"used_bytes"`    // left, layers in use included
	InUseLayers  int   `json:"in_use_layers"` // kept because something uses them
	BudgetBytes  int64 `json:"budget_bytes"`
	UnusedLayers int   `json:"unused_layers"` // kept within the budget
}

// item is a wheel or a layer the budget may remove.
type item struct {
	path  string
	bytes int64
	used  time.Time
	layer bool
}

// Collect keeps the wheels and the layers nothing uses within the budget,
// removing the least recently used first; inUse lists the layers a
// function or a snapshot names (asked once no work can add any), and those
// are never removed. With work between Begin and its end in progress it
// does nothing (ErrBusy).
func (m *Manager) Collect(inUse func() (map[string]bool, error)) (CollectStats, error) {
	m.mu.Lock()
	if m.working > 0 {
		m.mu.Unlock()
		return CollectStats{}, ErrBusy
	}
	m.collecting = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.collecting = false
		m.idle.Broadcast()
		m.mu.Unlock()
	}()
	st := CollectStats{BudgetBytes: m.budget}
	keep, err := inUse()
	if err != nil {
		return st, err
	}
	var items []item
	layers, err := os.ReadDir(m.Layers.dir)
	if err != nil {
		return st, err
	}
	for _, e := range layers {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(m.Layers.dir, e.Name())
		n, used := dirUsage(p)
		if keep[e.Name()] {
			st.InUseLayers++
			st.UsedBytes += n
			continue
		}
		items = append(items, item{path: p, bytes: n, used: used, layer: true})
	}
	wheels, err := os.ReadDir(m.Wheels.dir)
	if err != nil {
		return st, err
	}
	for _, e := range wheels {
		if e.IsDir() && hexRE.MatchString(e.Name()) {
			p := filepath.Join(m.Wheels.dir, e.Name())
			n, used := dirUsage(p)
			items = append(items, item{path: p, bytes: n, used: used})
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].used.Before(items[j].used) })
	var kept int64
	for _, it := range items {
		kept += it.bytes
	}
	for _, it := range items {
		if m.budget < 0 || kept <= m.budget {
			if it.layer {
				st.UnusedLayers++
			}
			continue
		}
		if err := os.RemoveAll(it.path); err != nil {
			return st, err
		}
		kept -= it.bytes
		st.FreedBytes += it.bytes
		if it.layer {
			st.Layers++
		} else {
			st.Wheels++
		}
	}
	st.UsedBytes += kept
	return st, nil
}

// dirUsage is the bytes of a directory's files and its time of last use
// (the directory's modification time, set on every use).
func dirUsage(dir string) (int64, time.Time) {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	var used time.Time
	if st, err := os.Stat(dir); err == nil {
		used = st.ModTime()
	}
	return n, used
}
