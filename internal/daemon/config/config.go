// Package config is the daemon's configuration: its settings, their
// defaults (some computed from the host's memory) and their validation,
// which reports every problem at once. Package daemon names it
// daemon.Config.
package config

import (
	"context"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/daemon/adaptive"
	"github.com/thaw-dev/thaw/internal/daemon/functions"
	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/internal/daemon/pool"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"
	"go.opentelemetry.io/otel/trace"
)

// Confinement defaults.
const (
	// DefaultVMUIDBase starts the range of user ids VMMs run as, one per
	// live VM, so that VMs cannot signal, trace or read each other. The
	// range 1879048192-2147483647 is left unused by Linux distributions
	// and systemd (their container ranges lie below it).
	DefaultVMUIDBase  = 1879048192
	DefaultVMUIDCount = 65536
	// DefaultVMMemoryOverheadMiB is what a VM's cgroup may use beyond guest
	// RAM: QEMU itself, TCG's translation cache, page cache it faults in.
	DefaultVMMemoryOverheadMiB = 384
)

// Config configures the daemon. Load it, then Check (or SetDefaults,
// then Validate).
type Config struct {
	DataDir          string        // catalog, functions, snapshots, run dirs
	ImageDir         string        // guest image (guest/build-image.sh output)
	Accel            string        // "auto", "kvm" or "tcg"
	DefaultMemoryMiB int           // guest memory when a function names none
	DefaultVCPUs     int           // vCPUs when a function names none
	BootTimeout      time.Duration // start to agent ready
	InvokeTimeout    time.Duration // default per-invocation timeout
	StoreDir         string        // snapshot memory store (premap): a tmpfs, hugetlbfs or fs-DAX directory, or a device-DAX device
	// StoreDeviceFile, if set, replaces StoreDir: a fixed-size file (on tmpfs)
	// standing in for a device-DAX device, for hosts without persistent
	// memory (tests, measurements): the devdax tier on a file.
	StoreDeviceFile string
	SnapBPFObject   string // snapbpf_capture.bpf.o (prepare's snapbpf capture)
	// FaultTraceObject, if set, is faulttrace.bpf.o: invocations then
	// report tracepoint counters of the VMM and the daemon (Trace).
	FaultTraceObject string
	TrustedGroup     string // group whose members may create functions from host directories, besides root
	// AllowFullEgress lets functions declare full egress (their guests
	// reach beyond the host, never the host itself).
	AllowFullEgress bool
	// FunctionRoots are the host directories functions may be created
	// from (by trusted callers); none: only archives.
	FunctionRoots []string
	// Strategies are the restore strategies the daemon offers; nil means
	// every strategy of package restore.
	Strategies []restore.Strategy

	// VMM confinement (zero values take the defaults).
	VMUIDBase           uint32 // first user id VMMs run as, one per live VM
	VMUIDCount          uint32 // how many
	VMMemoryOverheadMiB int    // a VM's cgroup memory limit beyond guest RAM
	VMCPUWeight         int    // a VM's cgroup CPU weight, 1-10000 (100: the default share)
	ConsoleLogLimit     int64  // bytes of guest console kept per VM
	CgroupRoot          string // the cgroup file system; "none" disables VM cgroups

	// MemorySource, if set, says for each restore whether the snapshot's
	// guest memory comes from a memory source (a lazily filled copy in an
	// object store) instead of its local memory file: a nil source means
	// the local file. placeholder is the file QEMU opens in its place
	// ("": the snapshot's memory file path, a placeholder there). Only
	// strategies marked Lazy restore from a source; the others fail with
	// restore.ErrNeedsLocalMemory.
	MemorySource func(ctx context.Context, snapID string) (src restore.MemorySource, placeholder string, err error) `json:"-"`

	// VMMName names the registered backend VMs run in (vmm.Register;
	// "": vmm.DefaultBackend) when VMM is nil; VMMSettings are that
	// backend's own settings (QEMU's: the interposer it preloads).
	VMMName     string
	VMMSettings vmm.Settings
	// VMM is the monitor VMs run in; nil: the backend VMMName names.
	VMM vmm.Backend `json:"-"`
	// TracerProvider makes the service's spans; nil: none.
	TracerProvider trace.TracerProvider `json:"-"`

	// Bounds (zero values take the defaults).
	MaxVMs               int // live VMs at once; default: host memory over (default guest memory + overhead)
	MaxStoredResultBytes int // result bytes an invocation's history keeps (the caller gets them all)
	// VMMemoryBudgetMiB bounds the memory live VMs may use together (guest
	// RAM plus VMMemoryOverheadMiB each); default: nine tenths of the
	// host's memory.
	VMMemoryBudgetMiB int
	// AdmissionQueue is how many VM starts may wait for room (default 64);
	// AdmissionTimeout how long one waits (default 30 s) before 429.
	AdmissionQueue   int
	AdmissionTimeout time.Duration
	// KeepAlive is how long a VM is kept idle after a cold invocation for
	// its function's next ones (a function's keep_alive_s overrides it;
	// negative: never); KeepAliveMaxIdle bounds idle VMs per function.
	// Zero values take the defaults (60 s, 2); KeepAlive < 0 turns the
	// pool off.
	KeepAlive        time.Duration
	KeepAliveMaxIdle int
	// KeepAliveMinAvailableMiB: while the host's available memory
	// (MemAvailable) is below it, idle VMs are stopped, the longest idle
	// first. Default: a twentieth of the host's memory, at least 512 MiB;
	// negative: never.
	KeepAliveMinAvailableMiB int
	// HugePageHint keeps QEMU's MADV_HUGEPAGE hint on every restore's
	// snapshot memory mapping (each major fault then reads about 4 MiB);
	// false, the default, drops it as Firecracker maps snapshots.
	HugePageHint bool
	// VMMPool is how many standby VMs (VMMs started ahead of a restore)
	// the VMM pool keeps per snapshot and strategy once that pair has
	// been restored (a function's vmm_pool overrides it); VMMPoolTTL how
	// long one waits unused; VMMPoolMemoryMiB bounds the memory they may
	// hold together (guest RAM plus VMMemoryOverheadMiB each). Defaults:
	// 1, 5 minutes, an eighth of the host's memory; VMMPool < 0 turns the
	// pool off.
	VMMPool          int
	VMMPoolTTL       time.Duration
	VMMPoolMemoryMiB int
	// HistoryMax and HistoryMaxAge bound the invocation history: the
	// newest HistoryMax records (default 100,000), none older than
	// HistoryMaxAge (default 30 days); negative: no bound of that kind.
	HistoryMax    int
	HistoryMaxAge time.Duration
	// MaxLogBytes is how much of an invocation's output its logs keep
	// (default 256 KiB, at most 1 MiB); HistoryMaxLogBytes how much the
	// history keeps of all logs, the oldest dropped first (default 1 GiB;
	// negative: no bound). Logs go with their invocation records.
	MaxLogBytes        int
	HistoryMaxLogBytes int64
	// Registry, if set, is the snapshot registry (push and pull);
	// ChunkCacheBudget bounds the local chunk cache in bytes (0: the
	// default, negative: no bound); RegistryPushOnPrepare pushes every
	// prepared warm snapshot.
	Registry              *registry.Config
	ChunkCacheBudget      int64
	RegistryPushOnPrepare bool
	// NoRegistryImport turns off the import of an invoked function this
	// node has no snapshot of (thawd --registry-import=false); with a
	// registry the daemon imports such a function lazily and restores.
	NoRegistryImport bool
	// LazyReadahead is how many chunks after a missed one a lazy restore's
	// memory fault also fetches (in the background; 0: none).
	LazyReadahead int
	// RemoteStrategy is the strategy of a cold start that names none when
	// the snapshot's memory is in the registry (an import, a lazy pull):
	// reap unless set (it fetches the least: its working set, then what
	// faults outside it). It must restore lazily (vanilla, reap, faasnap).
	RemoteStrategy string
	// RegistryGCInterval, if positive, runs a registry collection (chunks
	// and code archives no snapshot or function names, older than
	// RegistryGCGrace, DefaultGCGrace when 0) that often, the first a
	// tenth of it after start at the latest; 0: only when asked.
	RegistryGCInterval time.Duration
	RegistryGCGrace    time.Duration
	// RegistryRefresh is how often the functions here are compared with
	// the registry's records, an outdated copy replaced
	// (the daemon's RefreshFunctions); 0: never. Only with a registry and import on.
	RegistryRefresh time.Duration
	// RegistryTrustedKeys are the keys besides the node's own whose
	// signed registry records it accepts: key lines ("thaw-ed25519 BASE64
	// [comment]") or files of them, one a line.
	RegistryTrustedKeys []string
	// SnapshotKeep, if positive, is how many of each function's newest
	// snapshots garbage collection keeps; older ones go unless pinned or
	// in use. 0 (the default): snapshots are deleted only when asked.
	SnapshotKeep int
	// VersionKeep is how many of each function's newest versions keep
	// their snapshots, besides every version an alias routes to; older
	// versions' snapshots are collected (0: the default, package versions' DefaultKeep).
	VersionKeep int
	// Deps configures functions' dependencies (requirements.txt).
	Deps functions.DepsConfig
	// Adaptive configures the adaptive restore (package adaptive).
	Adaptive adaptive.Config
	// Ready configures ready clones (package pool).
	Ready pool.ReadyConfig
}

// SetDefaults fills the zero settings with their defaults, some computed
// from this host's memory.
func (c *Config) SetDefaults() {
	if c.VMUIDBase == 0 {
		c.VMUIDBase = DefaultVMUIDBase
	}
	if c.VMUIDCount == 0 {
		c.VMUIDCount = DefaultVMUIDCount
	}
	if c.VMMemoryOverheadMiB == 0 {
		c.VMMemoryOverheadMiB = DefaultVMMemoryOverheadMiB
	}
	if c.VMCPUWeight == 0 {
		c.VMCPUWeight = 100
	}
	if c.ConsoleLogLimit == 0 {
		c.ConsoleLogLimit = 1 << 20
	}
	if c.VMM == nil && c.VMMName == "" {
		c.VMMName = vmm.DefaultBackend
	}
	if c.MaxVMs == 0 {
		c.MaxVMs = defaultMaxVMs(c.DefaultMemoryMiB + c.VMMemoryOverheadMiB)
	}
	if c.MaxStoredResultBytes == 0 {
		c.MaxStoredResultBytes = history.DefaultMaxStoredResult
	}
	c.setLogDefaults()
	if c.VMMemoryBudgetMiB == 0 {
		c.VMMemoryBudgetMiB = HostMemoryMiB() * 9 / 10
	}
	if c.AdmissionQueue == 0 {
		c.AdmissionQueue = 64
	}
	if c.RemoteStrategy == "" {
		c.RemoteStrategy = string(restore.RemoteDefault())
	}
	if c.AdmissionTimeout == 0 {
		c.AdmissionTimeout = 30 * time.Second
	}
	c.setKeepDefaults()
	switch {
	case c.ChunkCacheBudget == 0:
		c.ChunkCacheBudget = regsync.DefaultChunkCacheBudget
	case c.ChunkCacheBudget < 0:
		c.ChunkCacheBudget = 0
	}
	if c.HistoryMax == 0 {
		c.HistoryMax = 100_000
	}
	if c.HistoryMaxAge == 0 {
		c.HistoryMaxAge = 30 * 24 * time.Hour
	}
	switch c.CgroupRoot {
	case "":
		c.CgroupRoot = "/sys/fs/cgroup"
	case "none":
		c.CgroupRoot = ""
	}
	c.Deps.SetDefaults()
	c.Ready.SetDefaults()
}

// setKeepDefaults fills the zero settings of what is kept ahead of
// requests: idle VMs (keep-alive) and VMMs started ahead of restores.
func (c *Config) setKeepDefaults() {
	switch {
	case c.KeepAlive == 0:
		c.KeepAlive = 60 * time.Second
	case c.KeepAlive < 0:
		c.KeepAlive = 0
	}
	if c.KeepAliveMaxIdle == 0 {
		c.KeepAliveMaxIdle = 2
	}
	if c.KeepAliveMinAvailableMiB == 0 {
		c.KeepAliveMinAvailableMiB = max(512, HostMemoryMiB()/20)
	}
	switch {
	case c.VMMPool == 0:
		c.VMMPool = 1
	case c.VMMPool < 0:
		c.VMMPool = 0
	}
	if c.VMMPoolTTL == 0 {
		c.VMMPoolTTL = 5 * time.Minute
	}
	if c.VMMPoolMemoryMiB == 0 {
		c.VMMPoolMemoryMiB = HostMemoryMiB() / 8
	}
}

// setLogDefaults fills the logs' zero settings.
func (c *Config) setLogDefaults() {
	if c.MaxLogBytes == 0 {
		c.MaxLogBytes = agent.DefaultMaxLogs
	}
	if c.HistoryMaxLogBytes == 0 {
		c.HistoryMaxLogBytes = history.DefaultHistoryMaxLogBytes
	}
}

// WithDefaults is c with its zero values replaced by what the daemon
// would use, computed from this host (thawd config check shows them).
func (c Config) WithDefaults() Config {
	c.SetDefaults()
	return c
}

// Backend is the monitor VMs run in: VMM, else the registered backend
// VMMName names, made with VMMSettings.
func (c *Config) Backend() (vmm.Backend, error) {
	if c.VMM != nil {
		return c.VMM, nil
	}
	return vmm.New(c.VMMName, c.VMMSettings)
}
