package daemon

import (
	"fmt"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// vmmProblems: a backend named by VMMName must be registered and take
// VMMSettings.
func (c *Config) vmmProblems() []error {
	if c.VMM != nil {
		return nil
	}
	if err := vmm.Check(c.VMMName, c.VMMSettings); err != nil {
		return []error{fmt.Errorf("vmm: %w", err)}
	}
	return nil
}

// backend is the monitor VMs run in: Config.VMM, else the registered
// backend VMMName names, made with VMMSettings.
func (c *Config) backend() (vmm.Backend, error) {
	if c.VMM != nil {
		return c.VMM, nil
	}
	return vmm.New(c.VMMName, c.VMMSettings)
}
