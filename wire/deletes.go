package wire

import "time"

// RunningInvocation is the invocation a VM is serving now: what a delete
// of the VM waits for, unless forced.
type RunningInvocation struct {
	ID        string    `json:"id"`
	StartedAt time.Time `json:"started_at"`
	RunningMS float64   `json:"running_ms"`
	TimeoutMS float64   `json:"timeout_ms"` // the invocation's timeout
}

// FunctionDeletion is what deleting a function removed (DELETE
// /v1/functions/{name}): with cascade, its VMs, snapshots, versions and
// aliases too.
type FunctionDeletion struct {
	Function  string            `json:"function"`
	VMs       []DeletedVM       `json:"vms"`
	Snapshots []DeletedSnapshot `json:"snapshots"`
	Versions  []int             `json:"versions"`
	Aliases   []string          `json:"aliases"`
	// CodeDirs is how many copies of code were removed: the function's
	// and its versions' (versions may share one).
	CodeDirs int     `json:"code_dirs"`
	MS       float64 `json:"ms"`
}

// DeletedVM is a VM a function's deletion stopped or forgot.
type DeletedVM struct {
	ID    string `json:"id"`
	State string `json:"state"` // the state it was in
	// Kept: it was idle in the keep-alive pool.
	Kept bool `json:"kept,omitempty"`
	// Invocation is the invocation it was running, which failed.
	Invocation string `json:"invocation,omitempty"`
}

// DeletedSnapshot is a snapshot a function's deletion removed.
type DeletedSnapshot struct {
	ID      string `json:"id"`
	Version int    `json:"version,omitempty"` // the version it belonged to (absent: made by hand)
	Pinned  bool   `json:"pinned,omitempty"`
	// Stored: its copy in the memory store was removed too.
	Stored bool `json:"stored,omitempty"`
}
