package daemon

import (
	"context"
	"fmt"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/functions"
	"github.com/thaw-dev/thaw/internal/datadir"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/fnconfig"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/secrets"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// Functions, their code, dependency layers and secrets live in package
// functions; this file wires that component into the service.

// FunctionSpec is a request to create a function (functions.Spec).
type FunctionSpec = functions.Spec

// SecretInfo is what the API shows of a secret: never its value.
type SecretInfo = functions.SecretInfo

// DepsConfig configures function dependencies (requirements.txt).
type DepsConfig = functions.DepsConfig

// Bounds on a function's code, from a directory or an archive, and the
// dependency cache's default budget.
const (
	MaxCodeBytes      = functions.MaxCodeBytes
	MaxCodeEntries    = functions.MaxCodeEntries
	MaxCodePath       = functions.MaxCodePath
	MaxCodeDepth      = functions.MaxCodeDepth
	RequirementsFile  = functions.RequirementsFile
	DefaultDepsBudget = functions.DefaultDepsBudget
)

// whySecretChanged stops idle VMs holding a secret's old value.
const whySecretChanged = "secret changed"

// openFunctions makes the functions component (its secret store and
// dependency cache) once the catalog is open.
func (s *Service) openFunctions() error {
	c := s.cfg
	m, err := functions.New(functions.Config{DataDir: c.DataDir, DefaultMemoryMiB: c.DefaultMemoryMiB, DefaultVCPUs: c.DefaultVCPUs,
		TrustedGroup: c.TrustedGroup, FunctionRoots: c.FunctionRoots, Deps: c.Deps}, s.functionsDeps())
	if err != nil {
		return err
	}
	s.functions = m
	return nil
}

// functionsDeps is what the functions component needs of the service.
func (s *Service) functionsDeps() functions.Deps {
	return functions.Deps{Catalog: s.db, Log: s.log, ValidName: ValidName, CheckRestoreSettings: CheckRestoreSettings,
		Reserve: s.reserveName,
		Created: func(ctx context.Context, f *catalog.Function, strategy, refresh string) error {
			return s.adaptive.Created(ctx, f, strategy, refresh)
		},
		CheckNetwork: func(p vmnet.Policy) error { return s.vms.CheckPolicy(p) }, // every policy passes before Start
		CallerFrom: func(ctx context.Context) (functions.Caller, bool) {
			c, ok := CallerFrom(ctx)
			return functions.Caller{Unix: c.Unix, UID: c.UID, GID: c.GID}, ok
		},
		Phase: phase,
		SecretChanged: func(name string) {
			s.pool.EvictWhere(func(k *kept) bool { return fnconfig.Uses(k.Fn.Secrets, name) }, whySecretChanged)
		},
		PullFile: func(ctx context.Context, rm *registry.RemoteManifest, path, dst string) error {
			return registryErr(s.reg.ChunkCache().PullFile(ctx, rm, path, dst, nil))
		},
	}
}

// reserveName claims name for one create at a time (no deploy or delete
// of it meanwhile); release gives it back.
func (s *Service) reserveName(ctx context.Context, name string) (release func(), err error) {
	if release, err = s.lifecycle.ClaimCreate(name); err != nil {
		return nil, err
	}
	if _, err := s.db.GetFunction(ctx, name); err == nil {
		release()
		return nil, fmt.Errorf("function %q: %w", name, ErrExists)
	}
	return release, nil
}

// CreateFunction creates a function from its code (functions.Manager).
func (s *Service) CreateFunction(ctx context.Context, spec FunctionSpec) (*catalog.Function, error) {
	return s.functions.CreateFunction(ctx, spec)
}

// GetFunction returns a function.
func (s *Service) GetFunction(ctx context.Context, name string) (*catalog.Function, error) {
	return s.functions.GetFunction(ctx, name)
}

// ListFunctions returns every function.
func (s *Service) ListFunctions(ctx context.Context) ([]*catalog.Function, error) {
	return s.functions.ListFunctions(ctx)
}

// SetSecret stores a secret's value (functions.Manager).
func (s *Service) SetSecret(ctx context.Context, name string, value []byte) (SecretInfo, bool, error) {
	return s.functions.SetSecret(ctx, name, value)
}

// GetSecret returns what may be shown of a secret.
func (s *Service) GetSecret(ctx context.Context, name string) (SecretInfo, error) {
	return s.functions.GetSecret(ctx, name)
}

// ListSecrets returns what may be shown of every secret, by name.
func (s *Service) ListSecrets(ctx context.Context) ([]SecretInfo, error) {
	return s.functions.ListSecrets(ctx)
}

// DeleteSecret removes a secret no function references.
func (s *Service) DeleteSecret(ctx context.Context, name string) error {
	return s.functions.DeleteSecret(ctx, name)
}

// Deps is the node's dependency machinery (a deploy resolves and builds
// through it).
func (s *Service) Deps() *deps.Manager { return s.functions.Deps() }

// RotateSecretKey seals the secret store of dataDir under a new key
// (secrets.Store.RotateKey) while no daemon uses the directory: it takes
// the data directory's lock, so a running daemon makes it fail.
func RotateSecretKey(dataDir string) error {
	lock, err := datadir.Lock(dataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	st, err := secrets.Open(dataDir)
	if err != nil {
		return err
	}
	return st.RotateKey()
}
