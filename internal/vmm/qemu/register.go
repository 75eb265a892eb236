package qemu

import (
	"errors"
	"fmt"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// Name is the name QEMU registers under (thawd --vmm qemu).
const Name = "qemu"

// SettingShim names the interposer's path among the backend's settings
// (thawd --shim).
const SettingShim = "shim"

// ErrNoInterposer: QEMU's settings name no interposer.
var ErrNoInterposer = errors.New("the interposer libthaw_shim.so is required: it hands every QEMU its files")

func init() {
	vmm.Register(Name, func(s vmm.Settings) (vmm.Backend, error) {
		set, err := ParseSettings(s)
		if err != nil {
			return nil, err
		}
		return New(set)
	})
}

// Settings are QEMU's own settings, the same for every VM it starts.
type Settings struct {
	// Shim is the interposer (libthaw_shim.so) preloaded into every QEMU:
	// it hands QEMU its files as descriptors and lays out restored guest
	// memory (docs/shim-layout.md).
	Shim string
}

// ParseSettings reads QEMU's settings from the backend settings the
// daemon was given, refusing names QEMU does not take.
func ParseSettings(v vmm.Settings) (Settings, error) {
	if err := vmm.UnknownSettings(v, SettingShim); err != nil {
		return Settings{}, err
	}
	return Settings{Shim: v[SettingShim]}, nil
}

// Values are s as backend settings (what ParseSettings reads).
func (s Settings) Values() vmm.Settings { return vmm.Settings{SettingShim: s.Shim} }

// Validate reports what keeps s from starting a QEMU.
func (s Settings) Validate() error {
	if s.Shim == "" {
		return fmt.Errorf("%w: %w", vmm.ErrBadSettings, ErrNoInterposer)
	}
	return nil
}

// New is QEMU as a backend with settings s.
func New(s Settings) (Backend, error) {
	if err := s.Validate(); err != nil {
		return Backend{}, err
	}
	return Backend{settings: s}, nil
}
