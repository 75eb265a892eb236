package api

import (
	"context"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/metrics"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// The API's view of the daemon, one interface per resource family. A
// handler reaches only the family its routes serve, so a family can be
// served by another implementation (a test's fake, a component of its own)
// without the rest. daemon.Service implements them all (ServicesOf).
type (
	// Functions: a function's record, its restore settings and working sets.
	Functions interface {
		ListFunctions(ctx context.Context) ([]*catalog.Function, error)
		CreateFunction(ctx context.Context, spec daemon.FunctionSpec) (*catalog.Function, error)
		GetFunction(ctx context.Context, name string) (*catalog.Function, error)
		DeleteFunctionWith(ctx context.Context, name string, cascade bool) (*daemon.FunctionDeletion, error)
		ImportWarnings(ctx context.Context, fn *catalog.Function) []string
		FunctionRestore(ctx context.Context, name string) (*wire.FunctionRestore, error)
		SetRestoreSettings(ctx context.Context, name string, req wire.RestoreSettings) (*wire.FunctionRestore, error)
		RestoreDoc(ctx context.Context, name string) *wire.FunctionRestore
		RefreshWorkingSets(ctx context.Context, req daemon.RefreshRequest) (*wire.WorkingSetRefresh, error)
		StartRefresh(ctx context.Context, req daemon.RefreshRequest) (*daemon.Operation, error)
	}
	// Versions: deploys, versions, aliases and rollback.
	Versions interface {
		Deploy(ctx context.Context, spec daemon.DeploySpec) (*daemon.DeployResult, error)
		StartDeploy(ctx context.Context, spec daemon.DeploySpec) (*daemon.Operation, error)
		ListVersions(ctx context.Context, function string) ([]*daemon.VersionInfo, error)
		GetVersionInfo(ctx context.Context, function string, number int) (*daemon.VersionInfo, error)
		ListAliases(ctx context.Context, function string) ([]*catalog.Alias, error)
		GetAlias(ctx context.Context, function, name string) (*catalog.Alias, error)
		SetAlias(ctx context.Context, function, name string, routing versions.Routing) (*catalog.Alias, error)
		DeleteAlias(ctx context.Context, function, name string) error
		Rollback(ctx context.Context, function string, to int) (*daemon.RollbackResult, error)
	}
	// Invocations: running a function, and what it answered and logged.
	Invocations interface {
		InvokeCold(ctx context.Context, req daemon.ColdRequest) (*daemon.Invocation, error)
		InvokeVM(ctx context.Context, vmID string, req daemon.InvokeRequest) (*daemon.Invocation, error)
		ListInvocations(ctx context.Context, function string, limit int, before time.Time, beforeID string) ([]*catalog.Invocation, error)
		FunctionLogs(ctx context.Context, req daemon.LogsRequest) (*daemon.LogsPage, error)
	}
	// VMs: live VMs and their lifecycle.
	VMs interface {
		ListVMs(ctx context.Context) ([]*catalog.VM, error)
		GetVM(ctx context.Context, id string) (*catalog.VM, error)
		RunningInvocation(vmID string) *wire.RunningInvocation
		BootVM(ctx context.Context, function string) (*catalog.VM, error)
		StartBoot(ctx context.Context, function string) (*daemon.Operation, error)
		PauseVM(ctx context.Context, id string) (*catalog.VM, error)
		ResumeVM(ctx context.Context, id string) (*catalog.VM, error)
		DeleteVM(ctx context.Context, id string) error
		DeleteVMForce(ctx context.Context, id string) error
		RestoreVM(ctx context.Context, snapID, strategy string) (*catalog.VM, *daemon.RestoreTiming, error)
		VMMemory(ctx context.Context, id string) (*daemon.VMMemory, error)
	}
	// Snapshots: snapshots, their preparation, copies and the memory store.
	Snapshots interface {
		ListSnapshots(ctx context.Context, function string) ([]*catalog.Snapshot, error)
		GetSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error)
		CreateSnapshot(ctx context.Context, vmID string) (*catalog.Snapshot, error)
		DeleteSnapshot(ctx context.Context, id string) error
		CheckSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error)
		PinSnapshot(ctx context.Context, id string, pinned bool) (*catalog.Snapshot, error)
		CopySnapshot(ctx context.Context, id string) (*catalog.Snapshot, error)
		StartCopy(ctx context.Context, id string) (*daemon.Operation, error)
		Prepare(ctx context.Context, req daemon.PrepareRequest) (*daemon.PrepareResult, error)
		StartPrepare(ctx context.Context, req daemon.PrepareRequest) (*daemon.Operation, error)
		StoreSnapshot(ctx context.Context, id string) (*store.Entry, error)
		StartStore(ctx context.Context, id string) (*daemon.Operation, error)
		UnstoreSnapshot(ctx context.Context, id string) error
		EvictSnapshot(ctx context.Context, id string) error
		StoreInfo(ctx context.Context) (*daemon.StoreInfo, error)
		SnapshotMemory(ctx context.Context, id string) (*daemon.SnapshotMemory, error)
	}
	// Registry: the snapshot registry other nodes share.
	Registry interface {
		PushSnapshot(ctx context.Context, id string) (*wire.PushResult, error)
		StartPush(ctx context.Context, id string) (*daemon.Operation, error)
		PullSnapshot(ctx context.Context, req wire.PullRequest) (*wire.PullResult, error)
		StartPull(ctx context.Context, req wire.PullRequest) (*daemon.Operation, error)
		ListRegistrySnapshots(ctx context.Context) ([]wire.RegistrySnapshot, error)
		DeleteRegistrySnapshot(ctx context.Context, id string) error
		CollectRegistry(ctx context.Context, req wire.GCRequest) (*wire.GCResult, error)
		StartGC(ctx context.Context, req wire.GCRequest) (*daemon.Operation, error)
	}
	// Operations: the asynchronous operations (?wait=false).
	Operations interface {
		ListOperations(ctx context.Context) ([]*daemon.Operation, error)
		Operation(ctx context.Context, id string) (*daemon.Operation, error)
		CancelOperation(ctx context.Context, id string) (*daemon.Operation, error)
		DeleteOperation(ctx context.Context, id string) error
	}
	// Secrets: the secret store (values are never read back).
	Secrets interface {
		ListSecrets(ctx context.Context) ([]daemon.SecretInfo, error)
		GetSecret(ctx context.Context, name string) (daemon.SecretInfo, error)
		SetSecret(ctx context.Context, name string, value []byte) (daemon.SecretInfo, bool, error)
		DeleteSecret(ctx context.Context, name string) error
	}
	// Host: what the daemon says of itself, and its metrics.
	Host interface {
		Info() daemon.Info
		Metrics() *metrics.Set
	}
)

// Services are the families a Handler serves. A nil family's routes are
// not served (404), and a nil Host means no metrics.
type Services struct {
	Functions
	Versions
	Invocations
	VMs
	Snapshots
	Registry
	Operations
	Secrets
	Host
}

// ServicesOf has d serve every family; a nil d serves none.
func ServicesOf(d *daemon.Service) Services {
	if d == nil {
		return Services{}
	}
	return Services{d, d, d, d, d, d, d, d, d}
}
