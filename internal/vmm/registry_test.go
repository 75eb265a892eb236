package vmm

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

type namedBackend struct{ name string }

func (b namedBackend) Name() string                               { return b.name }
func (namedBackend) Version(context.Context) (string, error)      { return "0", nil }
func (namedBackend) MachineABI() string                           { return "none" }
func (namedBackend) Start(context.Context, Spec) (Machine, error) { return nil, errors.New("no VMs") }
func (namedBackend) ProbeAccel(_ context.Context, a Accel, _, _, _ string, _ time.Duration) ProbeResult {
	return ProbeResult{Accel: a}
}

func TestRegistry(t *testing.T) {
	Register("registry-test-a", func(s Settings) (Backend, error) {
		if err := UnknownSettings(s, "size"); err != nil {
			return nil, err
		}
		return namedBackend{"registry-test-a" + s["size"]}, nil
	})
	Register("registry-test-broken", func(Settings) (Backend, error) { return nil, errors.New("no binary") })
	Register("registry-test-twice", func(Settings) (Backend, error) { return namedBackend{"one"}, nil })
	Register("registry-test-twice", func(Settings) (Backend, error) { return namedBackend{"two"}, nil })

	b, err := New("registry-test-a", nil)
	if err != nil || b.Name() != "registry-test-a" {
		t.Fatalf("New(registry-test-a) = %v, %v", b, err)
	}
	if !slices.Contains(Backends(), "registry-test-a") || !slices.IsSorted(Backends()) {
		t.Errorf("Backends() = %v: want registry-test-a among sorted names", Backends())
	}
	// A backend gets its own settings and refuses names it does not know.
	if b, err := New("registry-test-a", Settings{"size": "-9"}); err != nil || b.Name() != "registry-test-a-9" {
		t.Errorf("New with a setting = %v, %v; want the backend made from it", b, err)
	}
	err = Check("registry-test-a", Settings{"size": "1", "shim": "/x", "colour": "red"})
	if !errors.Is(err, ErrBadSettings) || !strings.Contains(err.Error(), "unknown colour, shim (known: size)") {
		t.Errorf("Check with unknown settings: %v, want ErrBadSettings naming both", err)
	}
	if err := Check("registry-test-a", Settings{"size": "1"}); err != nil {
		t.Errorf("Check with known settings: %v", err)
	}
	_, err = New("registry-test-missing", nil)
	if !errors.Is(err, ErrUnknownBackend) || !strings.Contains(err.Error(), "registry-test-a") {
		t.Errorf("unknown name: %v, want ErrUnknownBackend listing the known names", err)
	}
	if _, err := New("registry-test-broken", nil); err == nil || !strings.Contains(err.Error(), "vmm backend registry-test-broken: no binary") {
		t.Errorf("failing factory: %v", err)
	}
	if _, err := Lookup("registry-test-twice"); !errors.Is(err, ErrDuplicateBackend) {
		t.Errorf("name registered twice: %v, want ErrDuplicateBackend", err)
	}
}
