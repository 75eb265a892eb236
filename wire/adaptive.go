package wire

import (
	"encoding/json"
	"time"
)

// The adaptive restore: how a function's cold starts choose their restore
// strategy, the evidence behind the choice, and the refreshes of its
// recorded working sets.

// StrategyAuto is the strategy setting under which thaw chooses per cold
// start, from the function's own measurements.
const StrategyAuto = "auto"

// Refresh modes (FunctionRestore.Refresh).
const (
	// RefreshPrepare: a working set that drifted is recorded again with
	// the record input of the prepare that made it.
	RefreshPrepare = "prepare"
	// RefreshTraffic: with the invocation that showed the drift (used
	// once, never stored).
	RefreshTraffic = "traffic"
	// RefreshOff: never recorded again by itself.
	RefreshOff = "off"
)

// RestoreSettings is the body of PUT /v1/functions/{name}/restore; a field
// left out keeps its setting, "default" returns it to the daemon's
// default.
type RestoreSettings struct {
	// Strategy is "auto" or a strategy's name.
	Strategy *string `json:"strategy,omitempty"`
	// Refresh is "prepare", "traffic" or "off".
	Refresh *string `json:"refresh,omitempty"`
}

// FunctionRestore is how a function's cold starts restore (GET
// /v1/functions/{name}, "restore").
type FunctionRestore struct {
	// Strategy in force: "auto" or a strategy; StrategyFrom says whether
	// the function set it ("function") or it is the daemon's default
	// ("daemon").
	Strategy     string `json:"strategy"`
	StrategyFrom string `json:"strategy_from"`
	// Refresh in force ("prepare", "traffic" or "off") and where it comes
	// from, as for Strategy.
	Refresh     string `json:"refresh"`
	RefreshFrom string `json:"refresh_from"`
	// Versions are the function's versions with cold starts, newest first.
	Versions []RestoreVersion `json:"versions,omitempty"`
}

// RestoreVersion is the adaptive restore's state for one function version
// (0: unversioned snapshots).
type RestoreVersion struct {
	Version   int               `json:"version"`
	Locations []RestoreLocation `json:"locations"`
	// Drift is, per strategy with a recorded set, how many of its recent
	// cold starts touched more than the threshold outside it.
	Drift []DriftState `json:"drift,omitempty"`
	// Refreshes are the latest working-set refreshes, newest first.
	Refreshes []WorkingSetRefresh `json:"refreshes,omitempty"`
	// Prepare is the latest background prepare (artifacts for strategies
	// the snapshot had none of), if any.
	Prepare *BackgroundPrepare `json:"background_prepare,omitempty"`
}

// RestoreLocation is the choice for the version's snapshot at one place:
// "local" (its memory file on this host) or "remote" (its memory in the
// registry, fetched on demand).
type RestoreLocation struct {
	Location string `json:"location"`
	// Snapshot is the snapshot the evidence was measured on.
	Snapshot  string    `json:"snapshot"`
	Choice    string    `json:"choice"`
	Reason    string    `json:"reason"`
	ChangedAt time.Time `json:"changed_at"`
	// ColdStarts the policy decided, and how many of them explored
	// another strategy (at most a tenth).
	ColdStarts   int                `json:"cold_starts"`
	Explorations int                `json:"explorations"`
	Evidence     []StrategyEvidence `json:"evidence"`
}

// StrategyEvidence summarizes a strategy's recent cold starts.
type StrategyEvidence struct {
	Strategy        string    `json:"strategy"`
	Samples         int       `json:"samples"`
	MedianTotalMS   float64   `json:"median_total_ms"`
	MedianSetupMS   float64   `json:"median_setup_ms"`
	MedianResumeMS  float64   `json:"median_resume_ms"`
	MedianFaults    float64   `json:"median_faults"`
	MedianBytesRead float64   `json:"median_bytes_read"`
	LastAt          time.Time `json:"last_at"`
}

// DriftState is a strategy's drift window on the version's local snapshot.
type DriftState struct {
	Strategy string `json:"strategy"`
	// ColdStarts in the window (up to 10) and how many of them drifted.
	ColdStarts       int     `json:"cold_starts"`
	Drifted          int     `json:"drifted"`
	LastOutsideRatio float64 `json:"last_outside_ratio"`
	// Held says why no refresh will start for it (a refresh with the
	// prepare's input changed nothing, say); empty when one may.
	Held string `json:"held,omitempty"`
}

// WorkingSetRefresh is one refresh of a snapshot's recorded sets.
type WorkingSetRefresh struct {
	Operation  string   `json:"operation"`
	Snapshot   string   `json:"snapshot"`
	Strategies []string `json:"strategies"`
	// Reason says what drifted and by how much.
	Reason string `json:"reason"`
	// Source is the record input: "prepare" or "traffic".
	Source string `json:"source"`
	// State: running, succeeded, failed, or interrupted (the daemon
	// stopped during it; Error says which artifacts are in place).
	State     string         `json:"state"`
	Error     string         `json:"error,omitempty"`
	Sets      []RefreshedSet `json:"sets,omitempty"`
	StartedAt time.Time      `json:"started_at"`
	EndedAt   time.Time      `json:"ended_at,omitempty"`
}

// RefreshedSet is one strategy's set before and after a refresh.
type RefreshedSet struct {
	Strategy    string `json:"strategy"`
	PagesBefore uint64 `json:"pages_before"`
	PagesAfter  uint64 `json:"pages_after"`
	BytesBefore int64  `json:"bytes_before"`
	BytesAfter  int64  `json:"bytes_after"`
}

// BackgroundPrepare is a prepare the daemon started by itself.
type BackgroundPrepare struct {
	Operation string    `json:"operation"`
	Reason    string    `json:"reason"`
	State     string    `json:"state"` // running, succeeded, failed, interrupted
	Error     string    `json:"error,omitempty"`
	Snapshot  string    `json:"snapshot,omitempty"` // the warm snapshot it made
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitempty"`
}

// StrategyChoice says how a cold invocation's strategy was chosen.
type StrategyChoice struct {
	// How: "request" (the request named it), "function" (the function's
	// fixed strategy), "daemon" (the daemon's fixed default), or, under
	// auto, "rule", "measure", "exploit" or "explore".
	How    string `json:"how"`
	Reason string `json:"reason,omitempty"`
}

// RefreshRequest is the body of POST /v1/functions/{name}/refresh: record
// the working sets of the version's newest snapshot again now.
type RefreshRequest struct {
	// Event is the record input (used once, never stored); absent: the
	// input its prepare recorded with.
	Event json.RawMessage `json:"event,omitempty"`
	// Strategies to refresh; absent: every one with a recorded set.
	Strategies []string `json:"strategies,omitempty"`
}
