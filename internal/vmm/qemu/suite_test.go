package qemu

import (
	"testing"

	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/vmmsuite"
)

// TestSuite runs the backend conformance suite on real QEMU, the backend
// taken from the registry by the name thawd --vmm gives (skipped without
// THAW_IMAGE, as every test that boots the guest image).
func TestSuite(t *testing.T) {
	realSpec(t, "probe") // skips without an image
	vmmsuite.Suite(t, func(t *testing.T) vmm.Backend {
		b, err := vmm.New(Name, realSettings(t).Values())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, realSpec)
}
