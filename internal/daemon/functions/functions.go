// Package functions is the daemon's functions component: creating a
// function from its code (a directory on the daemon's host or an
// archive), the code's disk, its dependency layer (package deps) and its
// references to secrets (package secrets). What it needs of the rest of
// the daemon comes in through Deps.
package functions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/fnconfig"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/secrets"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// Spec is a request to create a function. Exactly one of Directory (on
// the daemon's host) and Archive (a tar.gz of the function directory) is
// set.
type Spec struct {
	Name      string
	Directory string
	Archive   io.Reader
	MemoryMiB int
	VCPUs     int
	Network   vmnet.Policy // what its guests may reach; zero: nothing
	// MaxConcurrency bounds the function's live VMs (0: no limit of its own).
	MaxConcurrency int
	// KeepAliveS: seconds its VMs stay idle after a cold invocation (0:
	// the daemon's default, -1: never).
	KeepAliveS int
	// VMMPool: standby VMs per snapshot and strategy (0: the daemon's
	// default, -1: none); VMMPoolTTLS: seconds one waits (0: default).
	VMMPool     int
	VMMPoolTTLS int
	// Env is the function's environment, set at boot before its handler is
	// imported (so it is in its snapshots); Secrets maps environment
	// variable names to secrets, set only in VMs restored from a snapshot
	// (package fnconfig).
	Env     map[string]string
	Secrets map[string]string
	// Deps, if set, are the function's resolved dependencies as another
	// node recorded them (a registry pull): its requirements.txt is not
	// resolved again, and the layer must be here already.
	Deps *catalog.Deps
	// Strategy ("auto" or a strategy) and Refresh ("prepare", "traffic"
	// or "off") are its restore settings; "": the daemon's defaults.
	Strategy, Refresh string
}

// Config configures the component.
type Config struct {
	DataDir          string // holds functions/, deps/ and the secret store
	DefaultMemoryMiB int    // guest memory when a function names none
	DefaultVCPUs     int    // vCPUs when a function names none
	// TrustedGroup's members may create functions from host directories,
	// besides root; FunctionRoots are the directories they may name.
	TrustedGroup  string
	FunctionRoots []string
	Deps          DepsConfig // dependency layers (setDefaults applied)
}

// Catalog is what the component reads and writes of the catalog
// (*catalog.DB).
type Catalog interface {
	GetFunction(ctx context.Context, name string) (*catalog.Function, error)
	ListFunctions(ctx context.Context) ([]*catalog.Function, error)
	PutFunction(ctx context.Context, f *catalog.Function) error
	DeleteFunction(ctx context.Context, name string) error
	ListVersions(ctx context.Context, function string) ([]*catalog.Version, error)
	ListSnapshots(ctx context.Context, function string) ([]*catalog.Snapshot, error)
	PublishVersion(ctx context.Context, p catalog.Publish) (*catalog.Version, error)
}

// Caller is who asked for a create, as the API established it: over the
// Unix socket the kernel vouches for UID and GID; over TCP (Unix false)
// the caller is only known to hold the token.
type Caller struct {
	Unix     bool
	UID, GID uint32
}

// Deps is what the component needs of the rest of the daemon. Every field
// is required unless its comment says otherwise.
type Deps struct {
	Catalog Catalog
	Log     *slog.Logger
	// ValidName checks a function name.
	ValidName func(name string) error
	// CheckRestoreSettings checks a create's restore settings.
	CheckRestoreSettings func(strategy, refresh string) error
	// Reserve claims a function name for one create at a time (no other
	// create or deploy of it meanwhile); release gives it back.
	Reserve func(ctx context.Context, name string) (release func(), err error)
	// Created tells the adaptive restore of a recorded function; an error
	// undoes the create.
	Created func(ctx context.Context, f *catalog.Function, strategy, refresh string) error
	// CheckNetwork is the VM network's check of a policy (full egress
	// allowed?); nil: every policy passes.
	CheckNetwork func(vmnet.Policy) error
	// CallerFrom returns the caller ctx carries (ok false: in-process).
	CallerFrom func(ctx context.Context) (Caller, bool)
	// Phase reports an operation's step.
	Phase func(ctx context.Context, name string)
	// SecretChanged stops the idle VMs of the functions that use secret.
	SecretChanged func(secret string)
	// PullFile fetches a remote snapshot's file whole into dst (the
	// registry's chunk cache), its errors already the service's.
	PullFile func(ctx context.Context, rm *registry.RemoteManifest, path, dst string) error
}

// Manager owns the functions' code, their dependency layers and the
// secret store.
type Manager struct {
	cfg        Config
	d          Deps
	log        *slog.Logger
	secrets    *secrets.Store
	secretRefs sync.Mutex    // held while a secret is deleted or a function comes to reference one
	deps       *deps.Manager // functions' dependency layers (deps.go)
	depsGC     chan struct{} // asks CollectDepsLoop for a run
}

// New opens the secret store and the dependency cache under the data
// directory.
func New(cfg Config, d Deps) (*Manager, error) {
	m := &Manager{cfg: cfg, d: d, log: d.Log, depsGC: make(chan struct{}, 1)}
	var err error
	if m.secrets, err = secrets.Open(cfg.DataDir); err != nil {
		return nil, err
	}
	if m.deps, err = m.openDeps(); err != nil {
		return nil, err
	}
	return m, nil
}

// FunctionsDir holds a directory per function (code/ and code.ext4).
func (m *Manager) FunctionsDir() string { return filepath.Join(m.cfg.DataDir, "functions") }

// CreateFunction unpacks the code, digests it and builds its disk: an ext4
// image holding <name>/handler.py and friends, attached read-only to the
// function's VMs beside the shared root filesystem. A requirements.txt at
// the top of the code is resolved and built into the function's dependency
// layer (deps.go); a create that fails leaves no function behind.
func (m *Manager) CreateFunction(ctx context.Context, spec Spec) (*catalog.Function, error) {
	netw, err := m.CheckSpec(&spec)
	if err != nil {
		return nil, err
	}
	if err := m.d.CheckRestoreSettings(spec.Strategy, spec.Refresh); err != nil {
		return nil, err
	}
	release, err := m.d.Reserve(ctx, spec.Name)
	if err != nil {
		return nil, err
	}
	defer release()
	staging, err := m.StageCode(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	// No collection of the dependency cache until the function is recorded.
	endDeps := m.deps.Begin()
	defer func() { endDeps(); m.KickDepsGC() }()
	f, err := m.BuildFunction(ctx, spec, netw, staging)
	if err != nil {
		return nil, err
	}
	if err := m.PutFunction(ctx, f); err != nil {
		_ = os.RemoveAll(filepath.Dir(f.CodeDir))
		return nil, err
	}
	if err := m.d.Created(ctx, f, spec.Strategy, spec.Refresh); err != nil {
		_ = m.d.Catalog.DeleteFunction(context.WithoutCancel(ctx), f.Name)
		_ = os.RemoveAll(filepath.Dir(f.CodeDir))
		return nil, err
	}
	m.log.Info("function created", "function", f.Name, "digest", f.Digest[:12])
	return f, nil
}

// StageCode unpacks spec's code into a new staging directory under the
// functions directory (<staging>/code/<name>/handler.py and friends),
// which the caller removes.
func (m *Manager) StageCode(ctx context.Context, spec Spec) (_ string, err error) {
	staging, err := os.MkdirTemp(m.FunctionsDir(), ".tmp-"+spec.Name+"-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(staging)
		}
	}()
	code := filepath.Join(staging, "code", spec.Name)
	if err := os.MkdirAll(code, 0o755); err != nil {
		return "", err
	}
	if spec.Directory != "" {
		err = m.copySource(ctx, code, spec.Directory)
	} else {
		err = extractArchive(code, spec.Archive)
	}
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(filepath.Join(code, "handler.py")); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: function %q has no handler.py at its top level", errdefs.ErrInvalid, spec.Name)
	}
	return staging, nil
}

// BuildFunction digests staged code and builds its disk and dependency
// layer (deps.go), then moves the staging directory to a directory of its
// own (functions/<name>-<id>: code/ and code.ext4) and returns the
// function's configuration, not yet recorded: the caller records it, or
// removes the directory, holding the dependency cache's collection off
// (deps.Manager.Begin) until then.
func (m *Manager) BuildFunction(ctx context.Context, spec Spec, netw vmnet.Policy, staging string) (*catalog.Function, error) {
	code := filepath.Join(staging, "code", spec.Name)
	digest, size, err := digestTree(code)
	if err != nil {
		return nil, err
	}
	if err := fnconfig.WriteDisk(filepath.Join(staging, "code"), spec.Env); err != nil {
		return nil, err
	}
	digest = fnconfig.Digest(digest, spec.Env)
	disk := filepath.Join(staging, "code.ext4")
	if err := makeExt4(ctx, disk, filepath.Join(staging, "code")); err != nil {
		return nil, err
	}
	fdeps, err := m.functionDeps(ctx, code, spec.Deps)
	if err != nil {
		return nil, err
	}
	// A directory of its own: a create never touches one it did not make.
	final := filepath.Join(m.FunctionsDir(), newDirName(spec.Name+"-"))
	if err := os.Rename(staging, final); err != nil {
		return nil, err
	}
	m.log.Debug("function code built", "function", spec.Name, "digest", digest[:12], "bytes", size)
	return &catalog.Function{Name: spec.Name, Digest: digest, CodeDir: filepath.Join(final, "code"),
		Disk: filepath.Join(final, "code.ext4"), MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, CreatedAt: time.Now(),
		Network: catalog.Network{Egress: string(netw.Egress), Services: netw.Services}, MaxConcurrency: spec.MaxConcurrency, KeepAliveS: spec.KeepAliveS,
		VMMPool: spec.VMMPool, VMMPoolTTLS: spec.VMMPoolTTLS, Env: spec.Env, Secrets: spec.Secrets, Deps: fdeps}, nil
}

// newDirName is prefix and 12 random hex digits.
func newDirName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// GetFunction returns a function.
func (m *Manager) GetFunction(ctx context.Context, name string) (*catalog.Function, error) {
	if err := m.d.ValidName(name); err != nil {
		return nil, err
	}
	return m.d.Catalog.GetFunction(ctx, name)
}

// ListFunctions returns every function.
func (m *Manager) ListFunctions(ctx context.Context) ([]*catalog.Function, error) {
	return m.d.Catalog.ListFunctions(ctx)
}

// CheckSpec validates a new function (filling the defaults) and returns
// its network policy, normalized.
func (m *Manager) CheckSpec(spec *Spec) (vmnet.Policy, error) {
	if err := m.d.ValidName(spec.Name); err != nil {
		return vmnet.Policy{}, err
	}
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = m.cfg.DefaultMemoryMiB
	}
	if spec.VCPUs == 0 {
		spec.VCPUs = m.cfg.DefaultVCPUs
	}
	errs := boundsProblems(spec)
	if (spec.Directory == "") == (spec.Archive == nil) {
		errs = append(errs, errors.New("give either a directory or an archive"))
	}
	netw, err := spec.Network.Normalize()
	if err != nil {
		errs = append(errs, err)
	}
	if err := fnconfig.Check(spec.Env, spec.Secrets); err != nil {
		errs = append(errs, err)
	} else if err := m.MissingSecrets(spec.Secrets); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return netw, fmt.Errorf("%w: %w", errdefs.ErrInvalid, errors.Join(errs...))
	}
	if m.d.CheckNetwork != nil {
		if err := m.d.CheckNetwork(netw); err != nil {
			return netw, fmt.Errorf("%w: %v", errdefs.ErrForbidden, err)
		}
	}
	return netw, nil
}

// boundsProblems reports every setting of spec out of its bounds.
func boundsProblems(spec *Spec) []error {
	var errs []error
	if spec.MemoryMiB < 128 || spec.MemoryMiB > 16384 {
		errs = append(errs, fmt.Errorf("memory_mib %d must be between 128 and 16384", spec.MemoryMiB))
	}
	if spec.VCPUs < 1 || spec.VCPUs > 16 {
		errs = append(errs, fmt.Errorf("vcpus %d must be between 1 and 16", spec.VCPUs))
	}
	if spec.KeepAliveS < -1 || spec.KeepAliveS > 86400 {
		errs = append(errs, fmt.Errorf("keep_alive_s %d must be -1 (never), 0 (the daemon's default) or up to 86400", spec.KeepAliveS))
	}
	if spec.VMMPool < -1 || spec.VMMPool > 16 {
		errs = append(errs, fmt.Errorf("vmm_pool %d must be -1 (none), 0 (the daemon's default) or up to 16", spec.VMMPool))
	}
	if spec.VMMPoolTTLS < 0 || spec.VMMPoolTTLS > 86400 {
		errs = append(errs, fmt.Errorf("vmm_pool_ttl_s %d must be 0 (the daemon's default) or up to 86400", spec.VMMPoolTTLS))
	}
	if spec.MaxConcurrency < 0 || spec.MaxConcurrency > 4096 {
		errs = append(errs, fmt.Errorf("max_concurrency %d must be between 0 (no limit of its own) and 4096", spec.MaxConcurrency))
	}
	return errs
}
