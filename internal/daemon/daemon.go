// Package daemon is thaw's service layer: functions, VMs, snapshots and
// invocations, orchestrated over the VMM, the snapshot format, the restore
// strategies and the catalog. It knows nothing of HTTP; package api maps its
// errors to status codes.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/thaw-dev/thaw/internal/daemon/config"
	"github.com/thaw-dev/thaw/internal/daemon/functions"
	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/internal/daemon/invoke"
	"github.com/thaw-dev/thaw/internal/daemon/lifecycle"
	"github.com/thaw-dev/thaw/internal/daemon/ops"
	"github.com/thaw-dev/thaw/internal/daemon/pool"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/daemon/restorer"
	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
	dversions "github.com/thaw-dev/thaw/internal/daemon/versions"
	"github.com/thaw-dev/thaw/internal/daemon/vms"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/metrics"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/tsc"
	"github.com/thaw-dev/thaw/internal/vmm"
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

// Config configures the daemon (package config).
type Config = config.Config

// The confinement settings are checked where confinement is built.
func init() { config.AddCheck(validateConfinement) }

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
	vms     *vms.Manager     // VMs with a VMM process, their confinement, the host (package daemon/vms)
	loaders *restore.Loaders // FaaSnap loaders, shared by all restores
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
	wg        sync.WaitGroup
	closed    bool
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
	// restorer restores clones from snapshots (package daemon/restorer).
	restorer *restorer.Restorer[*liveVM]
	// invoker serves invocations: warm, ready, kept and cold (package invoke).
	invoker *invoke.Invoker
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
	cfg.SetDefaults()
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
	if cfg.VMM, err = cfg.Backend(); err != nil {
		return nil, err
	}
	qv, err := cfg.VMM.Version(ctx)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, image: im, vmmVersion: qv, loaders: restore.NewLoaders(),
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
	s.vms = s.newVMs()
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
	s.pins = artifactPins{snapshots.NewPins(s.snapshotsDir())}
	s.adaptive = newAdaptive(s, cfg.Adaptive)
	s.prep = s.newPreparer()
	s.restorer = s.newRestorer()
	s.invoker = s.newInvoker()
	return s, nil
}

// Start reconciles what a previous daemon left (VMs, half-written files),
// opens the memory store and chooses the accelerator.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if err = s.vms.Reconcile(ctx); err != nil {
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
	if err := s.vms.OpenHost(); err != nil {
		return err
	}
	s.adoptStoreLeftovers()
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
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.reg.Run(s.stop) }()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.functions.CollectDepsLoop(s.stop) }()
	s.startReady()
	s.functions.KickDepsGC()
	s.log.Info("thawd ready", "accel", s.accel.Accel, "accel_source", s.accel.Source, "vmm", s.cfg.VMM.Name(), "vmm_version", s.vmmVersion, "tsc_khz", s.tscKHz,
		"image", s.image.Hash, "kernel", s.image.KernelVersion, "data_dir", s.cfg.DataDir)
	return nil
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
	s.mu.Unlock()
	s.ops.Shutdown() // running operations fail now; their work stops with its VMs
	s.vms.StopAll(ctx, catalog.StateStopped, "daemon stopped")
	s.ops.Wait()
	s.wg.Wait()
	s.vms.Wait()
	if err := s.snaps.CloseStore(); err != nil {
		s.log.Warn("close memory store", "err", err)
	}
	if s.faults != nil {
		_ = s.faults.Close()
	}
	s.vms.ReleaseHost()
	s.releaseStore()
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
