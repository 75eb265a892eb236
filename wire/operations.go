package wire

import "time"

// Operation kinds: the long requests that can run asynchronously (?wait=false).
const (
	OpBoot    = "boot"    // POST /v1/vms with a function
	OpPrepare = "prepare" // POST /v1/functions/{name}/prepare
	OpStore   = "store"   // PUT /v1/snapshots/{id}/store
	OpCopy    = "copy"    // POST /v1/snapshots/{id}/copy
	OpPush    = "push"    // POST /v1/snapshots/{id}/push
	OpPull    = "pull"    // POST /v1/snapshots/pull
	OpGC      = "gc"      // POST /v1/registry/gc
	OpDeploy  = "deploy"  // POST /v1/functions/{name}/deploy
	OpRebuild = "rebuild" // a version snapshotted again after what it was made from changed
	OpRefresh = "refresh" // a snapshot's recorded working sets recorded again after its inputs drifted
)

// Operation states.
const (
	OpRunning   = "running"
	OpSucceeded = "succeeded"
	OpFailed    = "failed"
)

// Operation is a long request running, or run, in the daemon's background:
// what ?wait=false answers (202) and GET /v1/operations/{id} shows.
type Operation struct {
	ID       string            `json:"id"`
	Kind     string            `json:"kind"`   // boot, prepare, store, copy, push, pull, gc, deploy, rebuild or refresh
	Target   string            `json:"target"` // the function (boot, prepare, deploy; rebuild: NAME:VERSION) or snapshot (store, copy, push, pull; a pull by function: the function; gc: the bucket)
	State    string            `json:"state"`  // running, succeeded or failed
	Progress OperationProgress `json:"progress"`
	// Result is, once succeeded, the body the synchronous request answers.
	Result *OperationResult `json:"result,omitempty"`
	// Error is, once failed, the error the synchronous request answers.
	Error     *OperationError `json:"error,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// OperationProgress is where an operation is: its phase and, where the
// work knows them, how much of how much is done (Unit says of what).
type OperationProgress struct {
	Phase string `json:"phase"`
	Done  int64  `json:"done,omitempty"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit,omitempty"` // "strategies" (prepare) or "bytes" (copy, push, pull)
}

// OperationResult holds a succeeded operation's result, in the field of
// its kind.
type OperationResult struct {
	VM       *VM            `json:"vm,omitempty"`       // boot
	Prepare  *PrepareResult `json:"prepare,omitempty"`  // prepare
	Store    *StoreEntry    `json:"store,omitempty"`    // store
	Snapshot *Snapshot      `json:"snapshot,omitempty"` // copy
	Push     *PushResult    `json:"push,omitempty"`     // push
	Pull     *PullResult    `json:"pull,omitempty"`     // pull
	GC       *GCResult      `json:"gc,omitempty"`       // gc
	Deploy   *Deploy        `json:"deploy,omitempty"`   // deploy, rebuild
	// Refresh: a working-set refresh the daemon started by itself.
	Refresh *WorkingSetRefresh `json:"refresh,omitempty"` // refresh
}

// OperationError is a failed operation's error: the HTTP status and error
// the synchronous request would have answered.
type OperationError struct {
	Status int `json:"status"`
	ErrorDetail
}
