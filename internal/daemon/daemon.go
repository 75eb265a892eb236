// Package daemon is thaw's service layer: functions, VMs, snapshots and
// invocations, orchestrated over the VMM, the snapshot format, the restore
// strategies and the catalog. It knows nothing of HTTP; package api maps its
// errors to status codes.
package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/adaptive"
	"github.com/thaw-dev/thaw/internal/daemon/functions"
	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/internal/daemon/lifecycle"
	"github.com/thaw-dev/thaw/internal/daemon/ops"
	"github.com/thaw-dev/thaw/internal/daemon/pool"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
	dversions "github.com/thaw-dev/thaw/internal/daemon/versions"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/metrics"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/tsc"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmnet"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/trace"
)

// Sentinel errors (package errdefs). The API maps them to status codes.
var (
	ErrNotFound         = errdefs.ErrNotFound
	ErrExists           = errdefs.ErrExists
	ErrInvalid          = errdefs.ErrInvalid
	ErrConflict         = errdefs.ErrConflict
	ErrTimeout          = errdefs.ErrTimeout
	ErrSnapshotUnusable = errdefs.ErrSnapshotUnusable
	ErrVMFailed         = errdefs.ErrVMFailed
	ErrNoSpace          = errdefs.ErrNoSpace
	ErrForbidden        = errdefs.ErrForbidden
	ErrTooMany          = errdefs.ErrTooMany
	ErrImport           = errdefs.ErrImport
	// ErrRegistryUnavailable: the registry cannot be reached (503).
	ErrRegistryUnavailable = errdefs.ErrRegistryUnavailable
	// ErrIndexUnavailable: the package index cannot be reached (503).
	ErrIndexUnavailable = errdefs.ErrIndexUnavailable
)

// Config configures the daemon. Load it, then Validate.
type Config struct {
	DataDir          string        // catalog, functions, snapshots, run dirs
	ImageDir         string        // guest image (guest/build-image.sh output)
	Accel            string        // "auto", "kvm" or "tcg"
	DefaultMemoryMiB int           // guest memory when a function names none
	DefaultVCPUs     int           // vCPUs when a function names none
	BootTimeout      time.Duration // start to agent ready
	InvokeTimeout    time.Duration // default per-invocation timeout
	ShimPath         string        // libthaw_shim.so (reap, faasnap and premap strategies)
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
	// "": vmm.DefaultBackend) when VMM is nil.
	VMMName string
	// VMM is the monitor VMs run in; nil: the backend VMMName names.
	VMM vmm.Backend `json:"-"`
	// TracerProvider makes the service's spans (tracing.go); nil: none.
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
	// negative: no bound). Logs go with their invocation records (logs.go).
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
	// (RefreshFunctions); 0: never. Only with a registry and import on.
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
	// versions' snapshots are collected (0: DefaultVersionKeep).
	VersionKeep int
	// Deps configures functions' dependencies (requirements.txt).
	Deps DepsConfig
	// Adaptive configures the adaptive restore (package adaptive).
	Adaptive AdaptiveConfig
	// Ready configures ready clones (readyclones.go).
	Ready ReadyConfig
}

// setDefaults fills the zero confinement settings.
func (c *Config) setDefaults() {
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
		c.MaxStoredResultBytes = DefaultMaxStoredResult
	}
	c.setLogDefaults()
	if c.VMMemoryBudgetMiB == 0 {
		c.VMMemoryBudgetMiB = hostMemoryMiB() * 9 / 10
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
		c.ChunkCacheBudget = DefaultChunkCacheBudget
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

// Check validates c as Open will, with its zero values taking their
// defaults; it opens nothing.
func (c Config) Check() error {
	c.setDefaults()
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
	if c.ShimPath == "" {
		errs = append(errs, errors.New("the interposer libthaw_shim.so is required: it hands every VMM its files"))
	}
	errs = append(errs, c.vmmProblems()...)
	errs = append(errs, validateConfinement(c)...)
	errs = append(errs, validateLogs(c)...)
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
		errs = append(errs, fmt.Errorf("version keep %d: give 0 (the default, %d) or 1-1000", c.VersionKeep, DefaultVersionKeep))
	}
	errs = append(errs, c.Adaptive.Validate()...)
	if c.MaxStoredResultBytes < 1024 {
		errs = append(errs, fmt.Errorf("max stored result %d bytes is below 1024", c.MaxStoredResultBytes))
	}
	errs = append(errs, c.Deps.Validate()...)
	errs = append(errs, c.Ready.Validate()...)
	return errors.Join(errs...)
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
		c.KeepAliveMinAvailableMiB = max(512, hostMemoryMiB()/20)
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
		c.VMMPoolMemoryMiB = hostMemoryMiB() / 8
	}
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
	if err := checkTrustedKeys(c); err != nil {
		errs = append(errs, err)
	}
	if c.RegistryGCGrace < 0 {
		errs = append(errs, fmt.Errorf("registry collection grace %s must not be negative", c.RegistryGCGrace))
	}
	return errs
}

// AccelInfo says which accelerator the daemon uses and why.
type AccelInfo = wire.AccelInfo

// Service is the daemon.
type Service struct {
	cfg        Config
	log        *slog.Logger
	db         *catalog.DB
	image      *guestimage.Image
	accel      AccelInfo
	vmmVersion string
	// tscKHz is the host's TSC frequency, given to every boot so the guest
	// never calibrates it (0: not measured; guests calibrate).
	tscKHz int

	mu      sync.Mutex
	vms     map[string]*liveVM // VMs with a process
	loaders *restore.Loaders   // FaaSnap loaders, shared by all restores
	// strategies are the restore strategies offered (Config.Strategies).
	strategies []restore.Strategy
	metrics    *metrics.Set
	tracer     trace.Tracer // spans of the service's steps (Config.TracerProvider)
	// What is kept ahead of requests, and admission (package pool).
	adm     *pool.Admission                    // which VM starts may proceed
	pool    *pool.KeepAlive[*liveVM]           // idle VMs kept for their function's next invocations
	vmmPool *pool.VMMPool[*liveVM, *coldStart] // VMMs started ahead of restores
	ready   *pool.Ready[*liveVM]               // clones restored ahead of requests
	// available reads the host's available memory (MiB) for the pool's
	// pressure watch.
	available func() (int, bool)
	stop      chan struct{} // closed by Close: background loops end
	// fnGates keep cold starts and the replacement of an outdated
	// function apart (regsync.go).
	fnGates   map[string]*sync.RWMutex
	wg        sync.WaitGroup
	closed    bool
	confine   confinement        // per-VM users and cgroups
	net       *vmnet.Host        // builds each VM's network
	lock      *os.File           // the data directory's lock, held while the daemon lives
	lifecycle *lifecycle.Manager // function deletes and the claims on function names (package lifecycle)
	ops       *ops.Registry      // asynchronous operations (?wait=false)
	history   *history.History   // invocation records and their logs
	faults    *faulttrace.Tracer // Config.FaultTraceObject's tracer; nil if off
	versions  *dversions.Manager // versions, aliases and deploys (package daemon/versions)
	functions *functions.Manager // functions, their code, dependency layers and secrets
	adaptive  *adaptive.Manager  // the adaptive restore (package adaptive)
	pins      artifactPins       // keep artifacts from being swapped under a restore (artifact_pins.go)
	reg       *regsync.Sync      // the snapshot registry: push, pull, lazy snapshots (regsync.go)
	snaps     *snapshots.Manager // snapshots, their verification, copies and the memory store (snapshots.go)
	// prep prepares functions: clean and warm snapshots, the strategies'
	// artifacts (prepare.go).
	prep *snapshots.Preparer
}

// Directory layout under DataDir.
func (s *Service) functionsDir() string { return filepath.Join(s.cfg.DataDir, "functions") }
func (s *Service) snapshotsDir() string { return filepath.Join(s.cfg.DataDir, "snapshots") }
func (s *Service) runDir() string       { return filepath.Join(s.cfg.DataDir, "run") }

// New opens the daemon (Open) and starts it (Start): what tests and
// in-process users call.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	s, err := Open(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		_ = s.Close(ctx)
		return nil, err
	}
	return s, nil
}

// Open validates the configuration, loads the guest image and opens the
// catalog, changing nothing else: a daemon that cannot serve (its address
// is taken, say) must not have touched VMs or files yet. Start does that.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	// Nothing the daemon writes is for other users (the API socket's 0660
	// is set explicitly).
	syscall.Umask(0o077)
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, cfg, log)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

func open(ctx context.Context, cfg Config, log *slog.Logger) (*Service, error) {
	im, err := guestimage.Load(cfg.ImageDir)
	if err != nil {
		return nil, err
	}
	if cfg.VMM, err = cfg.backend(); err != nil {
		return nil, err
	}
	qv, err := cfg.VMM.Version(ctx)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, image: im, vmmVersion: qv,
		vms: map[string]*liveVM{}, fnGates: map[string]*sync.RWMutex{}, loaders: restore.NewLoaders(),
		strategies: cfg.Strategies, ops: ops.New(log)}
	if s.strategies == nil {
		s.strategies = restore.Strategies()
	}
	s.metrics = metrics.New(s.metricState)
	s.tracer = newTracer(cfg.TracerProvider)
	s.adm = pool.NewAdmission(cfg.MaxVMs, cfg.VMMemoryBudgetMiB, cfg.AdmissionQueue, cfg.AdmissionTimeout)
	s.adm.Observe = s.metrics.Admission
	s.adm.Reclaim = func() bool { return s.vmmPool.Reclaim() || s.ready.Reclaim(whyReadyRoom) || s.pool.Reclaim() }
	s.pool = s.newKeepAlive()
	s.vmmPool = s.newVMMPool()
	s.ready = s.newReady()
	s.available, s.stop = hostAvailable, make(chan struct{})
	for _, d := range []string{cfg.DataDir, s.functionsDir(), s.snapshotsDir(), s.runDir(), s.resultsDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	s.db, err = catalog.Open(filepath.Join(cfg.DataDir, "catalog.db"))
	if err != nil {
		return nil, err
	}
	s.history = s.newHistory()
	s.lifecycle = s.newLifecycle()
	if err := s.openRegistry(); err != nil {
		_ = s.db.Close()
		return nil, err
	}
	if err := s.openFunctions(); err != nil {
		_ = s.db.Close()
		return nil, err
	}
	s.versions = s.newVersions(s.reg.Registry())
	s.snaps = s.newSnapshots()
	s.adaptive = newAdaptive(s, cfg.Adaptive)
	s.prep = s.newPreparer()
	return s, nil
}

// Start reconciles what a previous daemon left (VMs, half-written files),
// opens the memory store and chooses the accelerator.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if err = s.reconcile(ctx); err != nil {
		return err
	}
	if err := s.versions.RemovePendingSnapshots(ctx); err != nil {
		return fmt.Errorf("clean unfinished deploys: %w", err)
	}
	if err := s.removeLeftovers(ctx); err != nil {
		return fmt.Errorf("clean data dir: %w", err)
	}
	if err := s.adaptive.Recover(ctx); err != nil {
		return fmt.Errorf("adaptive restore: %w", err)
	}
	s.history.RemoveSpills()
	s.history.Prune(ctx)
	if fns, err := s.db.ListFunctions(ctx); err == nil {
		for _, f := range fns {
			s.collectSnapshots(ctx, f.Name)
			s.versions.CollectVersions(ctx, f.Name)
		}
	}
	if err := s.openConfinement(); err != nil {
		return err
	}
	s.adoptHostLeftovers()
	if s.net, err = vmnet.NewHost(vmnet.HostConfig{AllowFullEgress: s.cfg.AllowFullEgress}, s.log); err != nil {
		return err
	}
	s.snaps.OpenStore(ctx)
	if s.cfg.FaultTraceObject != "" {
		if s.faults, err = faulttrace.Open(s.cfg.FaultTraceObject); err != nil {
			return err
		}
	}
	s.accel, err = s.chooseAccel(ctx)
	if err != nil {
		return err
	}
	if s.tscKHz, err = tsc.MeasureKHz(20 * time.Millisecond); err != nil {
		s.log.Warn("host TSC not measured: guests calibrate their own, which a busy host can get wrong", "err", err)
	}
	if err := s.checkVersions(ctx); err != nil {
		return fmt.Errorf("check versions: %w", err)
	}
	if s.cfg.KeepAliveMinAvailableMiB > 0 && (s.cfg.KeepAlive > 0 || s.ready.On()) {
		s.wg.Add(1)
		go s.watchPressure(pressureInterval)
	}
	if s.reg.Registry() != nil && s.cfg.RegistryGCInterval > 0 {
		s.wg.Add(1)
		go s.every(s.cfg.RegistryGCInterval, s.reg.CollectScheduled)
	}
	if s.reg.Registry() != nil && !s.cfg.NoRegistryImport && s.cfg.RegistryRefresh > 0 {
		s.wg.Add(1)
		go s.every(s.cfg.RegistryRefresh, s.reg.RefreshScheduled)
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.functions.CollectDepsLoop(s.stop) }()
	s.startReady()
	s.functions.KickDepsGC()
	s.log.Info("thawd ready", "accel", s.accel.Accel, "accel_source", s.accel.Source, "vmm", s.cfg.VMM.Name(), "vmm_version", s.vmmVersion, "tsc_khz", s.tscKHz,
		"image", s.image.Hash, "kernel", s.image.KernelVersion, "data_dir", s.cfg.DataDir)
	return nil
}

// reconcile marks VMs whose processes are gone as failed and cleans their
// run directories. A VM process that is somehow still alive is killed: this
// daemon holds no QMP or agent connection to it, so it cannot be trusted.
func (s *Service) reconcile(ctx context.Context) error {
	vms, err := s.db.ListVMs(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, v := range vms {
		if !v.Live() {
			continue
		}
		reason := "qemu process gone when the daemon restarted"
		if v.PID > 0 && processMatches(v.PID, v.ID) {
			_ = syscall.Kill(v.PID, syscall.SIGKILL)
			reason = "daemon restarted; the VM could not be re-adopted and was killed"
		}
		if v.PID > 0 {
			waitGone(v.PID, 5*time.Second) // it may map a range of a device store
		}
		s.removeVMLink(v.ID)
		v.State, v.Reason, v.PID = catalog.StateFailed, reason, 0
		_ = os.RemoveAll(v.RunDir)
		if err := s.db.PutVM(ctx, v); err != nil {
			return fmt.Errorf("reconcile vm %s: %w", v.ID, err)
		}
		s.log.Warn("reconciled vm", "vm", v.ID, "reason", reason)
	}
	return nil
}

// waitGone waits until pid has exited (or is a zombie), at most d.
func waitGone(pid int, d time.Duration) {
	deadline := time.Now().Add(d)
	for !procstat.Exited(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// processMatches reports whether pid is a live QEMU of VM vmID (its
// command line names it "thaw-<id>"), so a recycled pid is never killed by
// mistake.
func processMatches(pid int, vmID string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return vmID != "" && bytes.Contains(b, []byte("\x00-name\x00thaw-"+vmID+"\x00"))
}

// chooseAccel honours an explicit accelerator; "auto" boots a probe guest on
// KVM and uses it only if the guest really booted. The probe's verdict is
// cached per host kernel, QEMU version and guest kernel.
func (s *Service) chooseAccel(ctx context.Context) (AccelInfo, error) {
	if s.cfg.Accel != "auto" {
		a, _ := vmm.ParseAccel(s.cfg.Accel)
		return AccelInfo{Accel: string(a), Source: "config", Detail: "set by configuration"}, nil
	}
	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	release := make([]byte, 0, len(uts.Release))
	for _, c := range uts.Release {
		if c == 0 {
			break
		}
		release = append(release, byte(c))
	}
	key := fmt.Sprintf("accel-probe:%s:%s:%s", release, s.vmmVersion, s.image.Files[s.image.KernelFile()].SHA256[:16])
	if cached, err := s.db.Setting(ctx, key); err == nil && cached != "" {
		if a, err := vmm.ParseAccel(cached[:3]); err == nil {
			return AccelInfo{Accel: string(a), Source: "cached-probe", Detail: cached[4:]}, nil
		}
	}
	res := s.cfg.VMM.ProbeAccel(ctx, vmm.AccelKVM, s.image.Path(s.image.KernelFile()), s.image.Path(guestimage.Initrd), s.runDir(), 20*time.Second)
	info := AccelInfo{Accel: string(vmm.AccelTCG), Source: "probe", Detail: "kvm probe failed: " + res.Detail}
	if res.OK {
		info = AccelInfo{Accel: string(vmm.AccelKVM), Source: "probe", Detail: "kvm probe: " + res.Detail}
	}
	s.log.Info("accelerator probe", "kvm_ok", res.OK, "detail", res.Detail)
	if err := s.db.SetSetting(ctx, key, info.Accel+":"+info.Detail); err != nil {
		return info, err
	}
	return info, nil
}

// Info describes the daemon.
type Info = wire.Info

// APIVersion is the API contract's version (openapi.json's info.version);
// the daemon's own is its build's (buildinfo.Version).
const APIVersion = "0.3.0"

// Close fails running operations, stops every VM (marking them stopped),
// undoes what the daemon changed on the host and closes the catalog.
func (s *Service) Close(ctx context.Context) error {
	s.vmmPool.Close()
	s.ready.Close()
	s.pool.Close()
	s.mu.Lock()
	if !s.closed {
		close(s.stop)
	}
	s.closed = true
	live := make([]*liveVM, 0, len(s.vms))
	for _, lv := range s.vms {
		live = append(live, lv)
	}
	s.mu.Unlock()
	s.ops.Shutdown() // running operations fail now; their work stops with its VMs
	for _, lv := range live {
		s.stopVM(ctx, lv, catalog.StateStopped, "daemon stopped")
	}
	s.ops.Wait()
	s.wg.Wait()
	if err := s.snaps.CloseStore(); err != nil {
		s.log.Warn("close memory store", "err", err)
	}
	if s.faults != nil {
		_ = s.faults.Close()
	}
	s.releaseHost()
	err := s.db.Close()
	if s.lock != nil {
		s.lock.Close() // releases the data directory
	}
	return err
}

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

var (
	nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	idRE   = map[string]*regexp.Regexp{
		"vm":        regexp.MustCompile(`^vm-[0-9a-f]{12}$`),
		"snapshot":  regexp.MustCompile(`^snap-[0-9a-f]{12}$`),
		"operation": regexp.MustCompile(`^op-[0-9a-f]{12}$`),
	}
)

// ValidName checks a function name.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: function name %q: use 1-63 lowercase letters, digits and '-', starting with a letter", ErrInvalid, name)
	}
	return nil
}

func validID(kind, id string) error {
	if re, ok := idRE[kind]; !ok || !re.MatchString(id) {
		return fmt.Errorf("%w: %s id %q is malformed", ErrInvalid, kind, id)
	}
	return nil
}
