package config

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	dversions "github.com/thaw-dev/thaw/internal/daemon/versions"
	"github.com/thaw-dev/thaw/internal/problemtest"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"

	// A configuration that names no VMM takes QEMU, as thawd's does.
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

func validConfig() Config {
	return Config{DataDir: "/var/lib/thaw", ImageDir: "/usr/share/thaw/image", Accel: "auto",
		DefaultMemoryMiB: 256, DefaultVCPUs: 1, BootTimeout: 30 * time.Second, InvokeTimeout: 10 * time.Second,
		VMMSettings: qemu.Settings{Shim: "/usr/lib/thaw/libthaw_shim.so"}.Values()}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *Config)
		want []string // one substring per problem
	}{
		{name: "valid with auto", edit: func(*Config) {}},
		{name: "valid with kvm", edit: func(c *Config) { c.Accel = "kvm" }},
		{name: "valid with tcg at the minimums", edit: func(c *Config) {
			c.Accel, c.DefaultMemoryMiB, c.DefaultVCPUs, c.BootTimeout, c.InvokeTimeout = "tcg", 128, 1, 1, 1
		}},
		{name: "unknown accelerator", edit: func(c *Config) { c.Accel = "xen" }, want: []string{`accel: unknown accelerator "xen"`}},
		{name: "memory below 128", edit: func(c *Config) { c.DefaultMemoryMiB = 127 }, want: []string{"default memory 127 MiB is below 128"}},
		{name: "negative invoke timeout", edit: func(c *Config) { c.InvokeTimeout = -time.Second }, want: []string{"timeouts must be positive"}},
		{name: "zero config lists every problem", edit: func(c *Config) { *c = Config{} }, want: []string{
			"data directory is required",
			"guest image directory is required",
			`accel: unknown accelerator ""`,
			"default memory 0 MiB is below 128",
			"default vcpus must be at least 1",
			"timeouts must be positive",
			"vmm: vmm backend qemu: bad vmm backend settings: the interposer libthaw_shim.so is required",
		}},
		{name: "a setting QEMU does not take", edit: func(c *Config) { c.VMMSettings["kernel"] = "/k" },
			want: []string{"vmm: vmm backend qemu: bad vmm backend settings: unknown kernel (known: shim)"}},
		{name: "unknown vmm", edit: func(c *Config) { c.VMMName = "no-such-vmm" }, want: []string{`unknown vmm backend "no-such-vmm"`}},
		{name: "remote strategy that cannot restore lazily", edit: func(c *Config) { c.RemoteStrategy = "premap" },
			want: []string{`remote strategy "premap": give a strategy that restores lazily`}},
		{name: "unknown remote strategy", edit: func(c *Config) { c.RemoteStrategy = "fast" },
			want: []string{`remote strategy "fast"`}},
		{name: "bounds", edit: func(c *Config) {
			c.VMMPoolTTL, c.VMMPoolMemoryMiB, c.MaxVMs, c.AdmissionQueue, c.LazyReadahead = -time.Second, -1, -1, -1, 65
		}, want: []string{"vmm pool ttl -1s", "vmm pool memory -1 MiB", "max vms -1", "admission queue and timeout", "lazy readahead 65 chunks"}},
		{name: "memory budget below one VM", edit: func(c *Config) { c.VMMemoryBudgetMiB = 100 },
			want: []string{"vm memory budget 100 MiB does not fit one VM of the default size (640 MiB with overhead)"}},
		{name: "versions and results", edit: func(c *Config) { c.VersionKeep, c.MaxStoredResultBytes = 1001, 10 },
			want: []string{"version keep 1001: give 0 (the default, " + strconv.Itoa(dversions.DefaultKeep) + ") or 1-1000", "max stored result 10 bytes is below 1024"}},
		{name: "registry settings without a registry", edit: func(c *Config) {
			c.RegistryPushOnPrepare, c.RegistryRefresh, c.RegistryGCGrace = true, time.Millisecond, -time.Second
		}, want: []string{"registry push on prepare needs a registry config", "registry refresh interval 1ms: give 0 (off) or 1s or more",
			"registry collection grace -1s must not be negative"}},
		{name: "several problems", edit: func(c *Config) { c.ImageDir, c.Accel, c.DefaultVCPUs = "", "KVM", 0 }, want: []string{
			"guest image directory is required", `unknown accelerator "KVM"`, "default vcpus must be at least 1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.edit(&c)
			c.SetDefaults()
			problemtest.Check(t, c.Validate(), tt.want)
		})
	}
}

// TestDefaults: zero settings take their defaults, negative ones turn a
// bound or a pool off, and what is set stays; WithDefaults leaves its
// receiver alone.
func TestDefaults(t *testing.T) {
	c := validConfig()
	if err := c.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	d := c.WithDefaults()
	if c.VMUIDBase != 0 || c.MaxVMs != 0 {
		t.Errorf("WithDefaults changed its receiver: %+v", c)
	}
	host := HostMemoryMiB()
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"vm uid base", d.VMUIDBase, uint32(DefaultVMUIDBase)}, {"vm uid count", d.VMUIDCount, uint32(DefaultVMUIDCount)},
		{"memory overhead", d.VMMemoryOverheadMiB, DefaultVMMemoryOverheadMiB}, {"cpu weight", d.VMCPUWeight, 100},
		{"console log", d.ConsoleLogLimit, int64(1 << 20)}, {"vmm", d.VMMName, vmm.DefaultBackend},
		{"max vms", d.MaxVMs, max(1, host/(256+DefaultVMMemoryOverheadMiB))},
		{"stored result", d.MaxStoredResultBytes, history.DefaultMaxStoredResult},
		{"max logs", d.MaxLogBytes, agent.DefaultMaxLogs}, {"history logs", d.HistoryMaxLogBytes, int64(history.DefaultHistoryMaxLogBytes)},
		{"memory budget", d.VMMemoryBudgetMiB, host * 9 / 10}, {"admission queue", d.AdmissionQueue, 64},
		{"admission timeout", d.AdmissionTimeout, 30 * time.Second}, {"remote strategy", d.RemoteStrategy, string(restore.RemoteDefault())},
		{"keep alive", d.KeepAlive, time.Minute}, {"keep alive idle", d.KeepAliveMaxIdle, 2},
		{"min available", d.KeepAliveMinAvailableMiB, max(512, host/20)}, {"vmm pool", d.VMMPool, 1},
		{"vmm pool ttl", d.VMMPoolTTL, 5 * time.Minute}, {"vmm pool memory", d.VMMPoolMemoryMiB, host / 8},
		{"chunk cache", d.ChunkCacheBudget, int64(regsync.DefaultChunkCacheBudget)}, {"history", d.HistoryMax, 100_000},
		{"history age", d.HistoryMaxAge, 30 * 24 * time.Hour}, {"cgroup root", d.CgroupRoot, "/sys/fs/cgroup"},
	} {
		if f.got != f.want {
			t.Errorf("%s: %v, want %v", f.name, f.got, f.want)
		}
	}

	c.KeepAlive, c.VMMPool, c.ChunkCacheBudget, c.CgroupRoot, c.MaxVMs = -1, -1, -1, "none", 7
	d = c.WithDefaults()
	if d.KeepAlive != 0 || d.VMMPool != 0 || d.ChunkCacheBudget != 0 || d.CgroupRoot != "" || d.MaxVMs != 7 {
		t.Errorf("off and set values: keep alive %v, vmm pool %d, chunk cache %d, cgroup root %q, max vms %d",
			d.KeepAlive, d.VMMPool, d.ChunkCacheBudget, d.CgroupRoot, d.MaxVMs)
	}
}

func TestDefaultMaxVMs(t *testing.T) {
	if n := defaultMaxVMs(640); n < 1 {
		t.Fatalf("defaultMaxVMs = %d", n)
	}
	if a, b := defaultMaxVMs(256), defaultMaxVMs(1<<20); a < b || b != 1 {
		t.Fatalf("more memory per VM gave more VMs: %d, %d", a, b)
	}
}

// TestMaxLogBytesChecked: the bound on an invocation's logs is 4 KiB to
// 1 MiB (0: the default).
func TestMaxLogBytesChecked(t *testing.T) {
	for n, ok := range map[int]bool{0: true, 4096: true, agent.MaxLogsLimit: true, -1: false, 100: false, agent.MaxLogsLimit + 1: false} {
		errs := validateLogs(&Config{MaxLogBytes: n})
		if ok != (len(errs) == 0) || !ok && !strings.Contains(errs[0].Error(), "4096 to 1048576") {
			t.Errorf("max logs %d: %v", n, errs)
		}
	}
}

// A trusted keys setting without a registry, or one naming no key file
// or a bad key, is a configuration error, listed with the others.
func TestTrustedKeysChecked(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("thaw-ed25519 nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := &registry.Config{Endpoint: "127.0.0.1:9", Bucket: "b"}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{RegistryTrustedKeys: []string{bad}}, "need a registry config"},
		{Config{Registry: reg, RegistryTrustedKeys: []string{filepath.Join(dir, "absent")}}, "absent"},
		{Config{Registry: reg, RegistryTrustedKeys: []string{bad}}, bad + ":1:"},
	} {
		if err := errors.Join(validateRegistry(&c.cfg)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.cfg.RegistryTrustedKeys, err, c.want)
		}
	}
}

// TestBackend: the backend given as a value wins (and needs no name or
// settings); else the named one is made from its settings.
func TestBackend(t *testing.T) {
	c := validConfig()
	c.SetDefaults()
	b, err := c.Backend()
	if err != nil || b.Name() != qemu.Name {
		t.Fatalf("Backend() = %v, %v; want QEMU", b, err)
	}
	c.VMMSettings = nil
	if _, err := c.Backend(); !errors.Is(err, qemu.ErrNoInterposer) {
		t.Errorf("QEMU without its interposer: %v", err)
	}
	c.VMM, c.VMMName = given{}, "no-such-vmm"
	if b, err := c.Backend(); err != nil || b != (given{}) {
		t.Errorf("a backend given as a value: %v, %v", b, err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate with a backend given as a value: %v", err)
	}
}

type given struct{ vmm.Backend }
