package triggers

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Workers: one durable consumer per function on the async stream, whose
// MaxAckPending is the function's concurrency across every node; each
// node pulls from every consumer and runs at most AsyncWorkers
// invocations at once. A message is acknowledged once its outcome is
// delivered; a node that dies before that leaves it to be redelivered
// (after AckWait) to any node.

type workers struct {
	t   *Triggers
	sem chan struct{} // this node's asynchronous invocations running

	mu    sync.Mutex
	ctx   context.Context // set by run; nil before
	loops map[string]*loop
}

// loop pulls one function's messages.
type loop struct {
	concurrency int
	stop        context.CancelFunc
	done        chan struct{}
}

func newWorkers(t *Triggers) *workers {
	return &workers{t: t, sem: make(chan struct{}, t.cfg.AsyncWorkers), loops: map[string]*loop{}}
}

func consumerName(function string) string { return "fn-" + function }

// ensure creates or updates the function's consumer with its concurrency
// and, once the workers run, pulls from it.
func (w *workers) ensure(ctx context.Context, function string) error {
	s, err := w.t.asyncConfig(ctx, function)
	if err != nil {
		return err
	}
	w.mu.Lock()
	l := w.loops[function]
	w.mu.Unlock()
	if l != nil && l.concurrency == s.Concurrency {
		return nil
	}
	_, err = w.t.e.js.CreateOrUpdateConsumer(ctx, asyncStream, jetstream.ConsumerConfig{
		Durable: consumerName(function), FilterSubject: asyncSubject + function, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: w.t.cfg.AckWait, MaxAckPending: s.Concurrency, MaxDeliver: -1,
		Description: "thaw asynchronous invocations of " + function})
	if err != nil {
		return errors.Join(ErrEngine, err)
	}
	w.start(function, s.Concurrency)
	return nil
}

// start runs (or restarts, with a new concurrency) the function's loop
// once the workers run.
func (w *workers) start(function string, concurrency int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil || w.ctx.Err() != nil {
		return
	}
	if l := w.loops[function]; l != nil {
		if l.concurrency == concurrency {
			return
		}
		l.stop()
		<-l.done
	}
	ctx, cancel := context.WithCancel(w.ctx)
	l := &loop{concurrency: concurrency, stop: cancel, done: make(chan struct{})}
	w.loops[function] = l
	go func() { defer close(l.done); w.pull(ctx, function, concurrency) }()
}

// run pulls from every function's consumer until ctx ends, finding the
// consumers other nodes (or an earlier run) made every few seconds.
func (w *workers) run(ctx context.Context) {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	var running sync.WaitGroup
	defer func() {
		w.mu.Lock()
		for _, l := range w.loops {
			l.stop()
			<-l.done
		}
		w.mu.Unlock()
		running.Wait()
	}()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		w.discover(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// discover starts a loop for every function consumer on the stream.
func (w *workers) discover(ctx context.Context) {
	st, err := w.t.e.js.Stream(ctx, asyncStream)
	if err != nil {
		if ctx.Err() == nil {
			w.t.log.Warn("async: list consumers", "err", err)
		}
		return
	}
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		fn, ok := strings.CutPrefix(name, "fn-")
		if !ok {
			continue
		}
		w.mu.Lock()
		known := w.loops[fn] != nil
		w.mu.Unlock()
		if !known {
			if err := w.ensure(ctx, fn); err != nil && ctx.Err() == nil {
				w.t.log.Warn("async: consumer", "function", fn, "err", err)
			}
		}
	}
	if err := names.Err(); err != nil && ctx.Err() == nil {
		w.t.log.Debug("async: list consumers", "err", err)
	}
}

// pull hands the function's messages to handlers, at most the node's
// worker count at once (the consumer's MaxAckPending bounds the function
// across nodes).
func (w *workers) pull(ctx context.Context, function string, concurrency int) {
	w.t.log.Debug("async: pulling", "function", function, "concurrency", concurrency)
	var running sync.WaitGroup
	defer running.Wait()
	for ctx.Err() == nil {
		cons, err := w.t.e.js.Consumer(ctx, asyncStream, consumerName(function))
		if err != nil {
			if ctx.Err() == nil {
				w.t.log.Warn("async: consumer unavailable", "function", function, "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		// Short pulls with frequent heartbeats: a pull a consumer's new
		// leader never saw (a cluster's election) is noticed in seconds.
		it, err := cons.Messages(jetstream.PullMaxMessages(max(concurrency, 1)), jetstream.PullExpiry(5*time.Second),
			jetstream.PullHeartbeat(time.Second))
		if err != nil {
			w.t.log.Debug("async: pull", "function", function, "err", err)
			sleep(ctx, time.Second)
			continue
		}
		stop := context.AfterFunc(ctx, it.Stop)
		for {
			msg, err := it.Next()
			if err != nil {
				if ctx.Err() == nil {
					w.t.log.Debug("async: pull ended; pulling again", "function", function, "err", err)
					sleep(ctx, 100*time.Millisecond)
				}
				break // stopped, or the consumer went away: start again
			}
			select {
			case w.sem <- struct{}{}:
			case <-ctx.Done():
				_ = msg.Nak()
				continue
			}
			running.Add(1)
			go func() {
				defer func() { <-w.sem; running.Done() }()
				w.t.handle(ctx, msg)
			}()
		}
		stop()
		it.Stop()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// handle runs one delivery of an asynchronous invocation.
func (t *Triggers) handle(ctx context.Context, msg jetstream.Msg) {
	h := msg.Headers()
	id, refStr := h.Get(hdrID), h.Get(hdrRef)
	md, err := msg.Metadata()
	if err != nil || id == "" || refStr == "" {
		t.log.Error("async: malformed message dropped", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	fn, _, _ := strings.Cut(refStr, ":")
	st := t.deliveryState(ctx, msg, id, refStr, md.Timestamp)
	if st == nil {
		return
	}
	s, err := t.asyncConfig(ctx, fn)
	if err != nil {
		_ = msg.NakWithDelay(time.Second)
		return
	}
	out := wire.Outcome{ID: id, Function: refStr, Event: msg.Data(), Schedule: st.Schedule, EnqueuedAt: st.EnqueuedAt}
	if age := time.Since(st.EnqueuedAt); age > s.MaxEventAge {
		out.Condition, out.Attempts, out.Error = "expired", st.Attempts, "event older than max_event_age "+s.MaxEventAge.String()
		t.finish(ctx, msg, st, &out, s.OnFailure)
		return
	}
	if st.Attempts == 0 {
		st.StartedAt = time.Now().UTC()
		t.m.startDelay(st.StartedAt.Sub(st.EnqueuedAt))
	}
	st.State, st.Attempts = wire.AsyncRunning, st.Attempts+1
	t.putState(ctx, st)
	inv, err := t.attempt(ctx, msg, st, refStr)
	switch {
	case ctx.Err() != nil: // this node is stopping: not an attempt
		st.State, st.Attempts = wire.AsyncQueued, st.Attempts-1
		t.putState(ctx, st)
		_ = msg.Nak()
		return
	case errors.Is(err, daemon.ErrTooMany) || errors.Is(err, ErrEngine) || errors.Is(err, daemon.ErrRegistryUnavailable):
		// No room, or a dependency away: not the function's failure.
		st.State, st.Attempts, st.Error = wire.AsyncRetrying, st.Attempts-1, err.Error()
		t.putState(ctx, st)
		t.m.attempt(fn, "throttled")
		_ = msg.NakWithDelay(time.Second + rand.N(time.Second))
		return
	}
	t.settle(ctx, msg, st, &out, s, inv, err)
}

// settle ends an attempt that ran: success and a last failure finish the
// invocation (to their destination), an earlier failure is retried after
// its backoff.
func (t *Triggers) settle(ctx context.Context, msg jetstream.Msg, st *wire.AsyncInvocation, out *wire.Outcome,
	s asyncSettings, inv *wire.Invocation, err error) {
	fn, _, _ := strings.Cut(out.Function, ":")
	out.Attempts, out.Invocation = st.Attempts, inv
	if inv != nil {
		st.Invocations = append(st.Invocations, inv.ID)
	}
	if err == nil && inv.OK {
		t.m.attempt(fn, "ok")
		out.Condition, st.Error = "success", ""
		t.finish(ctx, msg, st, out, s.OnSuccess)
		return
	}
	if err != nil {
		st.Error, out.Error = err.Error(), err.Error()
		t.m.attempt(fn, "platform_error")
	} else {
		st.Error = inv.Error.Error()
		t.m.attempt(fn, "function_error")
	}
	delay := backoff(s.Backoff, st.Attempts)
	if st.Attempts <= s.MaxRetries && time.Since(st.EnqueuedAt)+delay < s.MaxEventAge {
		st.State = wire.AsyncRetrying
		t.putState(ctx, st)
		t.log.Info("async invocation failed; retried", "id", out.ID, "function", out.Function, "attempt", st.Attempts, "delay", delay, "err", st.Error)
		_ = msg.NakWithDelay(delay)
		return
	}
	out.Condition = "failure"
	t.finish(ctx, msg, st, out, s.OnFailure)
}

// deliveryState reads the state of the invocation msg delivers, or starts
// a new one if it expired. When there is nothing to run it settles msg itself
// (retried later if the state is unavailable, acked if a redelivery of one
// already done) and returns nil.
func (t *Triggers) deliveryState(ctx context.Context, msg jetstream.Msg, id, refStr string, enqueued time.Time) *wire.AsyncInvocation {
	fn, _, _ := strings.Cut(refStr, ":")
	st, _, err := t.asyncState(ctx, id)
	if errors.Is(err, ErrNotFound) { // its state expired: start a new one
		st = &wire.AsyncInvocation{ID: id, Function: refStr, State: wire.AsyncQueued, EnqueuedAt: enqueued.UTC(),
			Schedule: msg.Headers().Get(hdrSchedule)}
	} else if err != nil {
		t.log.Warn("async: state unavailable; retried later", "id", id, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return nil
	}
	if st.State == wire.AsyncSucceeded || st.State == wire.AsyncFailed {
		t.m.duplicate(fn) // a redelivery of one already done
		_ = msg.Ack()
		return nil
	}
	return st
}

// attempt invokes the function once, in a span joining the enqueuer's
// trace, telling the engine it is still at work meanwhile.
func (t *Triggers) attempt(ctx context.Context, msg jetstream.Msg, st *wire.AsyncInvocation, ref string) (*wire.Invocation, error) {
	carrier := propagation.MapCarrier{} // NATS headers keep their keys' case: look them up as sent
	for _, k := range traceContext.Fields() {
		carrier[k] = msg.Headers().Get(k)
	}
	sctx := traceContext.Extract(ctx, carrier)
	sctx, sp := t.tracer.Start(sctx, "async "+ref, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("thaw.async_id", st.ID), attribute.String("thaw.function", ref),
			attribute.Int("thaw.attempt", st.Attempts)))
	defer sp.End()
	beat := time.NewTicker(t.cfg.AckWait / 3)
	defer beat.Stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-beat.C:
				_ = msg.InProgress()
			}
		}
	}()
	inv, err := t.inv.Invoke(sctx, ref, msg.Data(), 0)
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	} else {
		sp.SetAttributes(attribute.String("thaw.invocation", inv.ID), attribute.Bool("thaw.invocation.ok", inv.OK))
	}
	return inv, err
}

// finish delivers the outcome to dest, records the final state and
// acknowledges the message (so a crash before the acknowledgment runs
// it again: at least once).
func (t *Triggers) finish(ctx context.Context, msg jetstream.Msg, st *wire.AsyncInvocation, out *wire.Outcome, dest string) {
	out.FinishedAt = time.Now().UTC()
	fn, _, _ := strings.Cut(out.Function, ":")
	if err := t.dests.deliver(ctx, dest, out); err != nil {
		t.log.Warn("async outcome not delivered", "id", out.ID, "destination", redactURL(dest), "err", err)
		if out.Condition != "success" && dest != DestinationDLQ { // a failure is never lost
			if err := t.dests.deliver(ctx, DestinationDLQ, out); err != nil {
				_ = msg.NakWithDelay(5 * time.Second)
				return
			}
		}
	}
	st.State = wire.AsyncSucceeded
	if out.Condition != "success" {
		st.State = wire.AsyncFailed
		if out.Error != "" {
			st.Error = out.Error
		}
	}
	t.putState(ctx, st)
	t.m.outcome(fn, out.Condition)
	if err := msg.DoubleAck(context.WithoutCancel(ctx)); err != nil {
		t.log.Warn("async: acknowledgment failed; the invocation may be redelivered (its state says it is done)", "id", out.ID, "err", err)
	}
}

// backoff is the delay before retry n (1, 2, ...): base, then twice as
// long each time, with jitter in its upper half, at most an hour.
func backoff(base time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	return d/2 + rand.N(d/2+1)
}
