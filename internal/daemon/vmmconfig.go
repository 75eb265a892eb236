package daemon

import (
	"fmt"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// vmmProblems: a backend named by VMMName must be registered.
func (c *Config) vmmProblems() []error {
	if c.VMM != nil {
		return nil
	}
	if _, err := vmm.Lookup(c.VMMName); err != nil {
		return []error{fmt.Errorf("vmm: %w", err)}
	}
	return nil
}

// backend is the monitor VMs run in: Config.VMM, else the registered
// backend VMMName names.
func (c *Config) backend() (vmm.Backend, error) {
	if c.VMM != nil {
		return c.VMM, nil
	}
	return vmm.New(c.VMMName)
}
