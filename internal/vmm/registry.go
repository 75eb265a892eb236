package vmm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// DefaultBackend is the backend a daemon runs when its configuration names
// none.
const DefaultBackend = "qemu"

// Settings are a backend's own settings, by the names the backend gives
// them (QEMU's "shim": the interposer it preloads). The daemon passes them
// through without reading them; a backend refuses a name it does not know.
type Settings map[string]string

// Factory makes a backend of one kind from its settings. It checks them
// and starts nothing (Check calls it to validate a configuration).
type Factory func(Settings) (Backend, error)

var (
	// ErrBadSettings: a backend refused its settings.
	ErrBadSettings = errors.New("bad vmm backend settings")
	// ErrUnknownBackend: no backend registered under the name.
	ErrUnknownBackend = errors.New("unknown vmm backend")
	// ErrDuplicateBackend: two backends registered under one name, so the
	// name picks neither.
	ErrDuplicateBackend = errors.New("vmm backend registered twice")
)

var registry = struct {
	sync.Mutex
	factories map[string]Factory
	twice     map[string]bool
}{factories: map[string]Factory{}, twice: map[string]bool{}}

// Register makes a backend available under name; a backend's package calls
// it from init, and a program links the backends it offers by importing
// them. A name registered twice is refused by Lookup (it is not known
// which one was meant).
func Register(name string, f Factory) {
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.factories[name]; ok || f == nil || name == "" {
		registry.twice[name] = true
	}
	registry.factories[name] = f
}

// Lookup is the factory registered under name.
func Lookup(name string) (Factory, error) {
	registry.Lock()
	defer registry.Unlock()
	f, ok := registry.factories[name]
	switch {
	case !ok:
		known := strings.Join(backendNames(), ", ")
		if known == "" {
			known = "none registered"
		}
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownBackend, name, known)
	case registry.twice[name]:
		return nil, fmt.Errorf("%w: %q", ErrDuplicateBackend, name)
	}
	return f, nil
}

// New makes the backend registered under name with its settings.
func New(name string, settings Settings) (Backend, error) {
	f, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	b, err := f(settings)
	if err != nil {
		return nil, fmt.Errorf("vmm backend %s: %w", name, err)
	}
	return b, nil
}

// Check says whether New(name, settings) would make a backend.
func Check(name string, settings Settings) error {
	_, err := New(name, settings)
	return err
}

// UnknownSettings is an ErrBadSettings naming every setting of s that is
// not among known, nil if there is none.
func UnknownSettings(s Settings, known ...string) error {
	var bad []string
	for k := range s {
		if !slices.Contains(known, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	want := strings.Join(known, ", ")
	if want == "" {
		want = "none"
	}
	return fmt.Errorf("%w: unknown %s (known: %s)", ErrBadSettings, strings.Join(bad, ", "), want)
}

// Backends are the registered backends' names, sorted.
func Backends() []string {
	registry.Lock()
	defer registry.Unlock()
	return backendNames()
}

func backendNames() []string {
	names := make([]string, 0, len(registry.factories))
	for n := range registry.factories {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
