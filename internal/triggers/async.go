package triggers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// Asynchronous invocations: an event is published to the function's
// subject on the async stream (durable before the 202 is answered), and
// its state is kept in a bucket under its id.

// Message headers on the async stream.
const (
	hdrID       = "Thaw-Id"
	hdrRef      = "Thaw-Ref"
	hdrSchedule = "Thaw-Schedule"
	hdrEnqueued = "Thaw-Enqueued"
)

// EnqueueRequest asks for an asynchronous invocation.
type EnqueueRequest struct {
	Function string // NAME, NAME:VERSION or NAME:ALIAS
	Event    json.RawMessage
	// IdempotencyKey makes requests with the same key (for the same
	// function) one invocation, as long as its state is kept.
	IdempotencyKey string
	Schedule       string            // the schedule firing it, if any
	Trace          map[string]string // the caller's traceparent and tracestate
	// msgID, if set, is the stream's deduplication id (a schedule's tick).
	msgID string
}

var idemRE = regexp.MustCompile(`^[\x21-\x7e]{1,200}$`)

// asyncID is an invocation's id: derived from the function and the
// idempotency key when there is one (so a repeat finds it), else random.
func asyncID(function, idem string) string {
	if idem == "" {
		var b [10]byte
		_, _ = rand.Read(b[:])
		return "async-" + hex.EncodeToString(b[:])
	}
	h := sha256.Sum256([]byte(function + "\x00" + idem))
	return "async-" + hex.EncodeToString(h[:10])
}

// Enqueue queues an asynchronous invocation durably and answers its id.
func (t *Triggers) Enqueue(ctx context.Context, req EnqueueRequest) (*wire.AsyncAccepted, error) {
	ref, err := daemon.ParseRef(req.Function)
	if err != nil {
		return nil, err
	}
	if len(req.Event) > daemon.MaxEventBytes {
		return nil, fmt.Errorf("%w: event is %d bytes, the limit is %d", ErrInvalid, len(req.Event), daemon.MaxEventBytes)
	}
	if len(req.Event) > 0 && !json.Valid(req.Event) {
		return nil, fmt.Errorf("%w: event is not valid JSON", ErrInvalid)
	}
	if req.IdempotencyKey != "" && !idemRE.MatchString(req.IdempotencyKey) {
		return nil, fmt.Errorf("%w: idempotency key: 1-200 printable ASCII characters, no spaces", ErrInvalid)
	}
	if err := t.inv.CheckRef(ctx, req.Function); err != nil {
		return nil, err
	}
	id := asyncID(ref.Function, req.IdempotencyKey)
	acc := &wire.AsyncAccepted{ID: id, Function: ref.String()}
	now := time.Now().UTC()
	st := wire.AsyncInvocation{ID: id, Function: ref.String(), State: wire.AsyncQueued, IdempotencyKey: req.IdempotencyKey,
		Schedule: req.Schedule, EnqueuedAt: now, UpdatedAt: now}
	b, _ := json.Marshal(st)
	if _, err := t.e.asyncState.Create(ctx, id, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) && req.IdempotencyKey != "" {
			t.m.duplicate(ref.Function)
			acc.Duplicate = true
			return acc, nil
		}
		return nil, fmt.Errorf("%w: record invocation state: %v", ErrEngine, err)
	}
	if err := t.workers.ensure(ctx, ref.Function); err != nil {
		_ = t.e.asyncState.Purge(context.WithoutCancel(ctx), id)
		return nil, err
	}
	msg := nats.NewMsg(asyncSubject + ref.Function)
	msg.Data = req.Event
	msg.Header.Set(hdrID, id)
	msg.Header.Set(hdrRef, ref.String())
	msg.Header.Set(hdrEnqueued, now.Format(time.RFC3339Nano))
	if req.Schedule != "" {
		msg.Header.Set(hdrSchedule, req.Schedule)
	}
	for k, v := range req.Trace {
		msg.Header.Set(k, v)
	}
	msgID := req.msgID
	if msgID == "" {
		msgID = id
	}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	pa, err := t.e.js.PublishMsg(ctx, msg)
	if err != nil {
		_ = t.e.asyncState.Purge(context.WithoutCancel(ctx), id)
		return nil, fmt.Errorf("%w: queue invocation: %v", ErrEngine, err)
	}
	if pa.Duplicate {
		acc.Duplicate = true
		return acc, nil
	}
	t.m.enqueued(ref.Function)
	t.log.Debug("async invocation queued", "id", id, "function", ref.String(), "seq", pa.Sequence)
	return acc, nil
}

// GetAsync is an asynchronous invocation's state.
func (t *Triggers) GetAsync(ctx context.Context, id string) (*wire.AsyncInvocation, error) {
	st, _, err := t.asyncState(ctx, id)
	return st, err
}

var asyncIDRE = regexp.MustCompile(`^async-[0-9a-f]{20}$`)

func (t *Triggers) asyncState(ctx context.Context, id string) (*wire.AsyncInvocation, uint64, error) {
	if !asyncIDRE.MatchString(id) {
		return nil, 0, fmt.Errorf("%w: asynchronous invocation id %q is malformed", ErrInvalid, truncate(id, 60))
	}
	return getRecord[wire.AsyncInvocation](ctx, t.e.asyncState, "invocation state", id,
		fmt.Errorf("%w: asynchronous invocation %s (states are kept %s)", ErrNotFound, id, t.cfg.StateTTL))
}

// putState writes an invocation's state (the worker's, one writer at a
// time: the engine hands a message to one node).
func (t *Triggers) putState(ctx context.Context, st *wire.AsyncInvocation) {
	st.UpdatedAt = time.Now().UTC()
	b, _ := json.Marshal(st)
	if _, err := t.e.asyncState.Put(context.WithoutCancel(ctx), st.ID, b); err != nil {
		t.log.Warn("async invocation state not recorded", "id", st.ID, "state", st.State, "err", err)
	}
}

// Async settings' bounds.
const (
	maxRetriesLimit = 100
	maxEventAgeMax  = 24 * time.Hour
	maxBackoff      = time.Hour
)

// PutAsyncConfig sets how a function's asynchronous invocations are
// retried and where their outcomes go.
func (t *Triggers) PutAsyncConfig(ctx context.Context, c wire.AsyncConfig) (*wire.AsyncConfig, error) {
	if err := daemon.ValidName(c.Function); err != nil {
		return nil, err
	}
	var errs []error
	if c.MaxRetries != nil && (*c.MaxRetries < 0 || *c.MaxRetries > maxRetriesLimit) {
		errs = append(errs, fmt.Errorf("max_retries %d: use 0 to %d", *c.MaxRetries, maxRetriesLimit))
	}
	if c.MaxEventAgeS < 0 || time.Duration(c.MaxEventAgeS)*time.Second > maxEventAgeMax {
		errs = append(errs, fmt.Errorf("max_event_age_s %d: use 1 to %d", c.MaxEventAgeS, int64(maxEventAgeMax/time.Second)))
	}
	if c.BackoffMS < 0 || time.Duration(c.BackoffMS)*time.Millisecond > maxBackoff {
		errs = append(errs, fmt.Errorf("backoff_ms %d: use 1 to %d", c.BackoffMS, maxBackoff.Milliseconds()))
	}
	if c.Concurrency < 0 || c.Concurrency > 1000 {
		errs = append(errs, fmt.Errorf("concurrency %d: use 1 to 1000", c.Concurrency))
	}
	for _, d := range []struct{ name, v string }{{"on_success", c.OnSuccess}, {"on_failure", c.OnFailure}} {
		if err := t.dests.check(d.v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := t.inv.CheckRef(ctx, c.Function); err != nil {
		return nil, err
	}
	c.UpdatedAt = time.Now().UTC()
	b, _ := json.Marshal(c)
	if _, err := t.e.asyncConf.Put(ctx, c.Function, b); err != nil {
		return nil, fmt.Errorf("%w: store async settings: %v", ErrEngine, err)
	}
	if err := t.workers.ensure(ctx, c.Function); err != nil {
		return nil, err
	}
	return t.GetAsyncConfig(ctx, c.Function)
}

// GetAsyncConfig is a function's asynchronous settings (the defaults
// where it sets none).
func (t *Triggers) GetAsyncConfig(ctx context.Context, function string) (*wire.AsyncConfig, error) {
	if err := daemon.ValidName(function); err != nil {
		return nil, err
	}
	c, err := t.asyncConfig(ctx, function)
	if err != nil {
		return nil, err
	}
	r := c.MaxRetries
	out := wire.AsyncConfig{Function: function, AsyncConfigRequest: wire.AsyncConfigRequest{MaxRetries: &r,
		MaxEventAgeS: int64(c.MaxEventAge / time.Second), BackoffMS: c.Backoff.Milliseconds(), Concurrency: c.Concurrency,
		OnSuccess: c.OnSuccess, OnFailure: c.OnFailure}, UpdatedAt: c.UpdatedAt}
	return &out, nil
}

// DeleteAsyncConfig returns a function to the defaults.
func (t *Triggers) DeleteAsyncConfig(ctx context.Context, function string) error {
	if err := daemon.ValidName(function); err != nil {
		return err
	}
	if err := t.e.asyncConf.Purge(ctx, function); err != nil {
		return fmt.Errorf("%w: delete async settings: %v", ErrEngine, err)
	}
	return t.workers.ensure(ctx, function)
}

// asyncSettings are a function's effective settings.
type asyncSettings struct {
	MaxRetries           int
	MaxEventAge, Backoff time.Duration
	Concurrency          int
	OnSuccess, OnFailure string
	UpdatedAt            time.Time
}

func (t *Triggers) asyncConfig(ctx context.Context, function string) (asyncSettings, error) {
	s := asyncSettings{MaxRetries: t.cfg.MaxRetries, MaxEventAge: t.cfg.MaxEventAge, Backoff: t.cfg.Backoff,
		Concurrency: t.cfg.Concurrency, OnFailure: DestinationDLQ}
	e, err := t.e.asyncConf.Get(ctx, function)
	if isNotFound(err) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("%w: read async settings: %v", ErrEngine, err)
	}
	var c wire.AsyncConfig
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return s, fmt.Errorf("%w: async settings of %s are malformed: %v", ErrEngine, function, err)
	}
	if c.MaxRetries != nil {
		s.MaxRetries = *c.MaxRetries
	}
	if c.MaxEventAgeS > 0 {
		s.MaxEventAge = time.Duration(c.MaxEventAgeS) * time.Second
	}
	if c.BackoffMS > 0 {
		s.Backoff = time.Duration(c.BackoffMS) * time.Millisecond
	}
	if c.Concurrency > 0 {
		s.Concurrency = c.Concurrency
	}
	s.OnSuccess = c.OnSuccess
	if c.OnFailure != "" {
		s.OnFailure = c.OnFailure
	}
	s.UpdatedAt = c.UpdatedAt
	return s, nil
}
