package wire

import (
	"encoding/json"
	"time"
)

// Triggers: function endpoints on the functions listener, asynchronous
// invocations with retries and destinations, dead letters and schedules
// (docs/triggers.md).

// Endpoint maps HTTP requests on the functions listener (thawd
// --functions-listen) under PathPrefix to invocations of Function.
type Endpoint struct {
	Name string `json:"name"`
	// Function is NAME, NAME:VERSION or NAME:ALIAS.
	Function   string `json:"function"`
	PathPrefix string `json:"path_prefix"`
	// Auth is none or key (callers send the endpoint's key as a bearer
	// credential or in X-Thaw-Key).
	Auth string `json:"auth"`
	// KeyHint is the key's first characters, to tell keys apart; the key
	// itself is stored only as a hash.
	KeyHint string `json:"key_hint,omitempty"`
	// Key is the endpoint's key: in the answer of its creation or rotation
	// only.
	Key string `json:"key,omitempty"`
	// ExposeErrors: a handler error's answer (502) carries its type,
	// message and traceback; otherwise nothing of it.
	ExposeErrors bool      `json:"expose_errors,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	KeyRotatedAt time.Time `json:"key_rotated_at,omitzero"`
}

// CreateEndpointRequest is POST /v1/endpoints.
type CreateEndpointRequest struct {
	Function string `json:"function"`
	// Name defaults to the function's name (NAME-ALIAS for an alias).
	Name string `json:"name,omitempty"`
	// PathPrefix defaults to /NAME.
	PathPrefix   string `json:"path_prefix,omitempty"`
	Auth         string `json:"auth,omitempty"` // none (default) or key
	ExposeErrors bool   `json:"expose_errors,omitempty"`
}

// AsyncConfig is how a function's asynchronous invocations are retried
// and where their outcomes go. Zero values are the daemon's defaults.
type AsyncConfig struct {
	Function string `json:"function"`
	AsyncConfigRequest
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// AsyncConfigRequest is PUT /v1/functions/{name}/async: the function's
// settings as a whole (a field left out is the daemon's default).
type AsyncConfigRequest struct {
	// MaxRetries after the first attempt (nil: the default, 2).
	MaxRetries *int `json:"max_retries,omitempty"`
	// MaxEventAgeS: an event older than this is not tried again (default
	// 6 h).
	MaxEventAgeS int64 `json:"max_event_age_s,omitempty"`
	// BackoffMS is the delay before the first retry; each further retry
	// waits twice as long, with jitter.
	BackoffMS int64 `json:"backoff_ms,omitempty"`
	// Concurrency bounds the function's asynchronous invocations running
	// at once, across nodes.
	Concurrency int `json:"concurrency,omitempty"`
	// OnSuccess and OnFailure are destinations: "" (none), "dlq" (the
	// dead-letter subject) or an http(s) URL (a webhook). A failure with
	// no destination goes to the dead-letter subject.
	OnSuccess string `json:"on_success,omitempty"`
	OnFailure string `json:"on_failure,omitempty"`
}

// AsyncAccepted answers an asynchronous invocation (202).
type AsyncAccepted struct {
	ID       string `json:"id"`
	Function string `json:"function"`
	// Duplicate: an earlier request with the same idempotency key made
	// this invocation; nothing new was queued.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Asynchronous invocation states.
const (
	AsyncQueued    = "queued"
	AsyncRunning   = "running"
	AsyncRetrying  = "retrying"
	AsyncSucceeded = "succeeded"
	AsyncFailed    = "failed"
)

// AsyncInvocation is the state of one asynchronous invocation.
type AsyncInvocation struct {
	ID       string `json:"id"`
	Function string `json:"function"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	// Invocations are the ids of its attempts' invocations (in the
	// history), oldest first.
	Invocations    []string  `json:"invocations,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Schedule       string    `json:"schedule,omitempty"`
	Error          string    `json:"error,omitempty"`
	EnqueuedAt     time.Time `json:"enqueued_at"`
	// StartedAt is when its first attempt started.
	StartedAt time.Time `json:"started_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Outcome is the document a destination receives when an asynchronous
// invocation ends.
type Outcome struct {
	ID       string `json:"id"`
	Function string `json:"function"`
	// Condition is success, failure (the handler raised, or the platform
	// failed, on every attempt) or expired (older than max_event_age_s).
	Condition  string          `json:"condition"`
	Attempts   int             `json:"attempts"`
	Event      json.RawMessage `json:"event,omitempty"`
	Invocation *Invocation     `json:"invocation,omitempty"`
	// Error is the last attempt's platform error (a handler's error is in
	// the invocation).
	Error      string    `json:"error,omitempty"`
	Schedule   string    `json:"schedule,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// DeadLetter is an outcome kept on the dead-letter subject.
type DeadLetter struct {
	Seq     uint64    `json:"seq"`
	Stored  time.Time `json:"stored_at"`
	Outcome Outcome   `json:"outcome"`
}

// PurgeResult says how many dead letters a purge removed.
type PurgeResult struct {
	Purged uint64 `json:"purged"`
}

// CreateScheduleRequest is POST /v1/schedules.
type CreateScheduleRequest struct {
	Name     string          `json:"name"`
	Function string          `json:"function"`
	Cron     string          `json:"cron"`
	TimeZone string          `json:"time_zone,omitempty"`
	Event    json.RawMessage `json:"event,omitempty"`
	Missed   string          `json:"missed,omitempty"`
	Paused   bool            `json:"paused,omitempty"`
}

// Schedule invokes a function asynchronously on a cron schedule.
type Schedule struct {
	Name     string `json:"name"`
	Function string `json:"function"`
	// Cron has five fields (minute to weekday), six with seconds first,
	// or a descriptor (@hourly, @every 10s).
	Cron     string          `json:"cron"`
	TimeZone string          `json:"time_zone,omitempty"` // IANA name; default UTC
	Event    json.RawMessage `json:"event,omitempty"`
	Paused   bool            `json:"paused,omitempty"`
	// Missed is what a schedule does with firings missed while no node
	// ran it: skip (default) or once (fire once for them).
	Missed    string    `json:"missed,omitempty"`
	NextAt    time.Time `json:"next_at,omitzero"`
	LastAt    time.Time `json:"last_at,omitzero"`
	CreatedAt time.Time `json:"created_at"`
}
