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
	Register("registry-test-a", func() (Backend, error) { return namedBackend{"registry-test-a"}, nil })
	Register("registry-test-broken", func() (Backend, error) { return nil, errors.New("no binary") })
	Register("registry-test-twice", func() (Backend, error) { return namedBackend{"one"}, nil })
	Register("registry-test-twice", func() (Backend, error) { return namedBackend{"two"}, nil })

	b, err := New("registry-test-a")
	if err != nil || b.Name() != "registry-test-a" {
		t.Fatalf("New(registry-test-a) = %v, %v", b, err)
	}
	if !slices.Contains(Backends(), "registry-test-a") || !slices.IsSorted(Backends()) {
		t.Errorf("Backends() = %v: want registry-test-a among sorted names", Backends())
	}
	_, err = New("registry-test-missing")
	if !errors.Is(err, ErrUnknownBackend) || !strings.Contains(err.Error(), "registry-test-a") {
		t.Errorf("unknown name: %v, want ErrUnknownBackend listing the known names", err)
	}
	if _, err := New("registry-test-broken"); err == nil || !strings.Contains(err.Error(), "vmm backend registry-test-broken: no binary") {
		t.Errorf("failing factory: %v", err)
	}
	if _, err := Lookup("registry-test-twice"); !errors.Is(err, ErrDuplicateBackend) {
		t.Errorf("name registered twice: %v, want ErrDuplicateBackend", err)
	}
}
