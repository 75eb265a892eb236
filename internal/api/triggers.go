package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/triggers"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/propagation"
)

// The operator's routes of the triggers (docs/triggers.md): endpoints,
// asynchronous settings and states, dead letters, schedules. The
// endpoints' callers use the functions listener, never these.

// AsyncLocation is where an asynchronous invocation's state is read.
func asyncLocation(id string) string { return "/v1/async/" + id }

// maxDeadLetters is how many dead letters a listing reads at most.
const maxDeadLetters = 10_000

func (h *Handler) triggerRoutes() []route {
	t := h.opts.Triggers
	return []route{
		{"GET", "/v1/endpoints", list(h, func(ctx context.Context, _ *http.Request) ([]*wire.Endpoint, error) {
			return withTriggers(t, func() ([]*wire.Endpoint, error) { return t.ListEndpoints(ctx) })
		}, func(e *wire.Endpoint) string { return e.Name }, same)},
		{"POST", "/v1/endpoints", readThen(h, readSmallBody[wire.CreateEndpointRequest], func(w http.ResponseWriter, r *http.Request, req wire.CreateEndpointRequest) {
			e, err := withTriggers(t, func() (*wire.Endpoint, error) { return t.CreateEndpoint(r.Context(), req) })
			reply(h, w, r, http.StatusCreated, e, err)
		})},
		{"GET", "/v1/endpoints/{name}", triggerOne(h, "name", t.GetEndpoint)},
		{"DELETE", "/v1/endpoints/{name}", triggerDone(h, "name", t.DeleteEndpoint)},
		{"POST", "/v1/endpoints/{name}/rotate-key", triggerOne(h, "name", t.RotateEndpointKey)},
		{"GET", "/v1/functions/{name}/async", triggerOne(h, "name", t.GetAsyncConfig)},
		{"PUT", "/v1/functions/{name}/async", readThen(h, readSmallBody[wire.AsyncConfigRequest], h.putAsyncConfig)},
		{"DELETE", "/v1/functions/{name}/async", triggerDone(h, "name", t.DeleteAsyncConfig)},
		{"GET", "/v1/async/{id}", triggerOne(h, "id", t.GetAsync)},
		{"GET", "/v1/dead-letters", list(h, func(ctx context.Context, r *http.Request) ([]wire.DeadLetter, error) {
			return withTriggers(t, func() ([]wire.DeadLetter, error) {
				return t.ListDeadLetters(ctx, r.URL.Query().Get("function"), 0, maxDeadLetters)
			})
		}, func(d wire.DeadLetter) string { return fmt.Sprintf("%020d", d.Seq) }, same)},
		{"DELETE", "/v1/dead-letters", func(w http.ResponseWriter, r *http.Request) {
			n, err := withTriggers(t, func() (uint64, error) { return t.PurgeDeadLetters(r.Context(), r.URL.Query().Get("function")) })
			reply(h, w, r, http.StatusOK, wire.PurgeResult{Purged: n}, err)
		}},
		{"GET", "/v1/dead-letters/{id}", triggerOne(h, "id", t.GetDeadLetter)},
		{"POST", "/v1/dead-letters/{id}/replay", func(w http.ResponseWriter, r *http.Request) {
			acc, err := withTriggers(t, func() (*wire.AsyncAccepted, error) { return t.ReplayDeadLetter(r.Context(), r.PathValue("id")) })
			h.acceptedAsync(w, r, acc, err)
		}},
		{"GET", "/v1/schedules", list(h, func(ctx context.Context, _ *http.Request) ([]*wire.Schedule, error) {
			return withTriggers(t, func() ([]*wire.Schedule, error) { return t.ListSchedules(ctx) })
		}, func(s *wire.Schedule) string { return s.Name }, same)},
		{"POST", "/v1/schedules", readThen(h, readSmallBody[wire.CreateScheduleRequest], func(w http.ResponseWriter, r *http.Request, req wire.CreateScheduleRequest) {
			s, err := withTriggers(t, func() (*wire.Schedule, error) {
				return t.CreateSchedule(r.Context(), wire.Schedule{Name: req.Name, Function: req.Function, Cron: req.Cron,
					TimeZone: req.TimeZone, Event: req.Event, Missed: req.Missed, Paused: req.Paused})
			})
			reply(h, w, r, http.StatusCreated, s, err)
		})},
		{"GET", "/v1/schedules/{name}", triggerOne(h, "name", t.GetSchedule)},
		{"DELETE", "/v1/schedules/{name}", triggerDone(h, "name", t.DeleteSchedule)},
		{"POST", "/v1/schedules/{name}/pause", triggerOne(h, "name", func(ctx context.Context, name string) (*wire.Schedule, error) {
			return t.PauseSchedule(ctx, name, true)
		})},
		{"POST", "/v1/schedules/{name}/resume", triggerOne(h, "name", func(ctx context.Context, name string) (*wire.Schedule, error) {
			return t.PauseSchedule(ctx, name, false)
		})},
	}
}

// withTriggers runs op, or says the triggers are not running.
func withTriggers[T any](t *triggers.Triggers, op func() (T, error)) (T, error) {
	if t == nil {
		var zero T
		return zero, fmt.Errorf("%w: this daemon runs no triggers", triggers.ErrEngine)
	}
	return op()
}

// triggerOne answers 200 with what call gives for the path's param, or
// says the triggers are not running (t may be nil: call is not called).
func triggerOne[R any](h *Handler, param string, call func(context.Context, string) (R, error)) http.HandlerFunc {
	t := h.opts.Triggers
	return one(h, param, http.StatusOK, func(ctx context.Context, v string) (R, error) {
		return withTriggers(t, func() (R, error) { return call(ctx, v) })
	}, same)
}

// triggerDone answers 204 once call is done with the path's param, or
// says the triggers are not running.
func triggerDone(h *Handler, param string, call func(context.Context, string) error) http.HandlerFunc {
	t := h.opts.Triggers
	return done(h, param, func(ctx context.Context, v string) error {
		_, err := withTriggers(t, func() (any, error) { return nil, call(ctx, v) })
		return err
	})
}

func (h *Handler) putAsyncConfig(w http.ResponseWriter, r *http.Request, req wire.AsyncConfigRequest) {
	c, err := withTriggers(h.opts.Triggers, func() (*wire.AsyncConfig, error) {
		return h.opts.Triggers.PutAsyncConfig(r.Context(), wire.AsyncConfig{Function: r.PathValue("name"), AsyncConfigRequest: req})
	})
	reply(h, w, r, http.StatusOK, c, err)
}

// invokeFunction serves POST /v1/functions/{name}/invoke: at once, or
// queued with ?async=true (202 with the invocation's id; an
// Idempotency-Key header makes repeats one invocation).
func (h *Handler) invokeFunction(w http.ResponseWriter, r *http.Request) {
	switch v := r.URL.Query().Get("async"); v {
	case "", "false":
		readThen(h, readInvokeFunction, h.invokeCold)(w, r)
		return
	case "true":
	default:
		h.fail(w, r, fmt.Errorf("%w: async=%q: want true or false", daemon.ErrInvalid, v))
		return
	}
	cr, err := readInvokeFunction(w, r)
	if err == nil && (cr.Snapshot != "" || cr.Strategy != "" || cr.Variant != "" || cr.EvictCache || cr.Strict || cr.Logs) {
		err = fmt.Errorf("%w: an asynchronous invocation takes an event only (its function's snapshot, strategy and timeout are the defaults; its logs are in the history)", daemon.ErrInvalid)
	}
	if err == nil && cr.Timeout != 0 {
		err = fmt.Errorf("%w: timeout_ms applies to synchronous invocations only", daemon.ErrInvalid)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	acc, err := withTriggers(h.opts.Triggers, func() (*wire.AsyncAccepted, error) {
		return h.opts.Triggers.Enqueue(r.Context(), triggers.EnqueueRequest{Function: cr.Function, Event: cr.Event,
			IdempotencyKey: r.Header.Get(triggers.IdempotencyKeyHeader), Trace: traceHeaders(r.Context())})
	})
	h.acceptedAsync(w, r, acc, err)
}

// acceptedAsync answers a queued asynchronous invocation: 202, its state
// at Location.
func (h *Handler) acceptedAsync(w http.ResponseWriter, r *http.Request, acc *wire.AsyncAccepted, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Location", asyncLocation(acc.ID))
	writeJSON(w, http.StatusAccepted, acc)
}

// traceHeaders is the request's trace as W3C headers, carried with a
// queued invocation so its run joins the caller's trace.
func traceHeaders(ctx context.Context) map[string]string {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c
}
