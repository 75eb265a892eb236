package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	dversions "github.com/thaw-dev/thaw/internal/daemon/versions"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Check validates c as Open will, with its zero values taking their
// defaults; it opens nothing.
func (c Config) Check() error {
	c.SetDefaults()
	return c.Validate()
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data directory is required"))
	}
	if c.ImageDir == "" {
		errs = append(errs, errors.New("guest image directory is required"))
	}
	if c.Accel != "auto" {
		if _, err := vmm.ParseAccel(c.Accel); err != nil {
			errs = append(errs, fmt.Errorf("accel: %w (or auto)", err))
		}
	}
	if c.DefaultMemoryMiB < 128 {
		errs = append(errs, fmt.Errorf("default memory %d MiB is below 128", c.DefaultMemoryMiB))
	}
	if c.DefaultVCPUs < 1 {
		errs = append(errs, errors.New("default vcpus must be at least 1"))
	}
	if c.BootTimeout <= 0 || c.InvokeTimeout <= 0 {
		errs = append(errs, errors.New("timeouts must be positive"))
	}
	errs = append(errs, c.vmmProblems()...)
	errs = append(errs, validateLogs(c)...)
	errs = append(errs, confinementProblems(c)...)
	if c.VMMPoolTTL < 0 {
		errs = append(errs, fmt.Errorf("vmm pool ttl %s: must be positive", c.VMMPoolTTL))
	}
	if c.VMMPoolMemoryMiB < 0 {
		errs = append(errs, fmt.Errorf("vmm pool memory %d MiB: must not be negative", c.VMMPoolMemoryMiB))
	}
	if c.MaxVMs < 1 {
		errs = append(errs, fmt.Errorf("max vms %d: need at least 1", c.MaxVMs))
	}
	if c.VMMemoryBudgetMiB < c.DefaultMemoryMiB+c.VMMemoryOverheadMiB {
		errs = append(errs, fmt.Errorf("vm memory budget %d MiB does not fit one VM of the default size (%d MiB with overhead)",
			c.VMMemoryBudgetMiB, c.DefaultMemoryMiB+c.VMMemoryOverheadMiB))
	}
	if c.AdmissionQueue < 0 || c.AdmissionTimeout < 0 {
		errs = append(errs, errors.New("admission queue and timeout must not be negative"))
	}
	if c.LazyReadahead < 0 || c.LazyReadahead > 64 {
		errs = append(errs, fmt.Errorf("lazy readahead %d chunks: must be between 0 and 64", c.LazyReadahead))
	}
	if st, ok := restore.Lookup(restore.Kind(c.RemoteStrategy)); !ok || !st.Lazy {
		errs = append(errs, fmt.Errorf("remote strategy %q: give a strategy that restores lazily (%s)", c.RemoteStrategy, restore.JoinKinds(restore.LazyKinds())))
	}
	errs = append(errs, validateRegistry(c)...)
	if c.VersionKeep < 0 || c.VersionKeep > 1000 {
		errs = append(errs, fmt.Errorf("version keep %d: give 0 (the default, %d) or 1-1000", c.VersionKeep, dversions.DefaultKeep))
	}
	errs = append(errs, c.Adaptive.Validate()...)
	if c.MaxStoredResultBytes < 1024 {
		errs = append(errs, fmt.Errorf("max stored result %d bytes is below 1024", c.MaxStoredResultBytes))
	}
	errs = append(errs, c.Deps.Validate()...)
	errs = append(errs, c.Ready.Validate()...)
	return errors.Join(errs...)
}

// validateRegistry reports the problems of the registry's settings.
func validateRegistry(c *Config) []error {
	var errs []error
	if c.Registry != nil {
		if err := c.Registry.Validate(); err != nil {
			errs = append(errs, err)
		}
	} else if c.RegistryPushOnPrepare {
		errs = append(errs, errors.New("registry push on prepare needs a registry config"))
	} else if c.RegistryGCInterval > 0 {
		errs = append(errs, errors.New("a scheduled registry collection needs a registry config"))
	}
	for _, iv := range []struct {
		what string
		d    time.Duration
	}{{"registry collection interval", c.RegistryGCInterval}, {"registry refresh interval", c.RegistryRefresh}} {
		if iv.d < 0 || (iv.d > 0 && iv.d < time.Second) {
			errs = append(errs, fmt.Errorf("%s %s: give 0 (off) or 1s or more", iv.what, iv.d))
		}
	}
	if err := regsync.CheckTrustedKeys(c.Registry, c.RegistryTrustedKeys); err != nil {
		errs = append(errs, err)
	}
	if c.RegistryGCGrace < 0 {
		errs = append(errs, fmt.Errorf("registry collection grace %s must not be negative", c.RegistryGCGrace))
	}
	return errs
}

// validateLogs checks the logs' settings of c.
func validateLogs(c *Config) []error {
	if c.MaxLogBytes < 0 || c.MaxLogBytes > 0 && (c.MaxLogBytes < 4096 || c.MaxLogBytes > agent.MaxLogsLimit) {
		return []error{fmt.Errorf("max logs %d bytes: must be 4096 to %d", c.MaxLogBytes, agent.MaxLogsLimit)}
	}
	return nil
}

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

// confinementProblems are the problems of the confinement settings of c.
func confinementProblems(c *Config) []error {
	var errs []error
	if c.VMUIDCount == 0 || uint64(c.VMUIDBase)+uint64(c.VMUIDCount) > 1<<32-2 {
		errs = append(errs, fmt.Errorf("vm user ids %d+%d do not fit below 4294967294", c.VMUIDBase, c.VMUIDCount))
	}
	if c.VMUIDBase < 1000 {
		errs = append(errs, fmt.Errorf("vm user id base %d overlaps system users", c.VMUIDBase))
	}
	if c.VMMemoryOverheadMiB < 64 {
		errs = append(errs, fmt.Errorf("vm memory overhead %d MiB is below 64 MiB", c.VMMemoryOverheadMiB))
	}
	if c.VMCPUWeight < 1 || c.VMCPUWeight > 10000 {
		errs = append(errs, fmt.Errorf("vm cpu weight %d is outside 1-10000", c.VMCPUWeight))
	}
	if c.ConsoleLogLimit < 4096 {
		errs = append(errs, fmt.Errorf("console log limit %d bytes is below 4096", c.ConsoleLogLimit))
	}
	if c.CgroupRoot != "" && !strings.HasPrefix(c.CgroupRoot, "/") {
		errs = append(errs, errors.New("cgroup root must be an absolute path"))
	}
	return errs
}
