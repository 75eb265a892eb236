package client

import (
	"context"
	"encoding/json"
	"net/url"

	"github.com/thaw-dev/thaw/wire"
)

// Triggers: endpoints, asynchronous invocations, dead letters and
// schedules (docs/triggers.md).
type (
	Endpoint              = wire.Endpoint
	CreateEndpointRequest = wire.CreateEndpointRequest
	AsyncConfig           = wire.AsyncConfig
	AsyncConfigRequest    = wire.AsyncConfigRequest
	AsyncAccepted         = wire.AsyncAccepted
	AsyncInvocation       = wire.AsyncInvocation
	Outcome               = wire.Outcome
	DeadLetter            = wire.DeadLetter
	PurgeResult           = wire.PurgeResult
	Schedule              = wire.Schedule
	CreateScheduleRequest = wire.CreateScheduleRequest
)

type headersKey struct{}

// extraHeaders are the headers a request's context asks for.
func extraHeaders(ctx context.Context) map[string]string {
	h, _ := ctx.Value(headersKey{}).(map[string]string)
	return h
}

// InvokeFunctionAsync queues an invocation durably (202) and answers its
// id; a non-empty idempotencyKey makes repeats one invocation.
func (c *Client) InvokeFunctionAsync(ctx context.Context, name string, event json.RawMessage, idempotencyKey string) (*AsyncAccepted, error) {
	if idempotencyKey != "" {
		ctx = context.WithValue(ctx, headersKey{}, map[string]string{"Idempotency-Key": idempotencyKey})
	}
	return call[AsyncAccepted](ctx, c, "POST", functionPath(name)+"/invoke?async=true", invokeBody(event, InvokeOptions{}))
}

// GetAsync is an asynchronous invocation's state.
func (c *Client) GetAsync(ctx context.Context, id string) (*AsyncInvocation, error) {
	return call[AsyncInvocation](ctx, c, "GET", "/v1/async/"+url.PathEscape(id), nil)
}

// CreateEndpoint creates an endpoint; with key auth the answer carries
// its key, the only time it is shown.
func (c *Client) CreateEndpoint(ctx context.Context, req CreateEndpointRequest) (*Endpoint, error) {
	return call[Endpoint](ctx, c, "POST", "/v1/endpoints", req)
}

// ListEndpoints lists the endpoints.
func (c *Client) ListEndpoints(ctx context.Context) ([]Endpoint, error) {
	return all[Endpoint](ctx, c, "/v1/endpoints", url.Values{}, 0)
}

// GetEndpoint describes an endpoint.
func (c *Client) GetEndpoint(ctx context.Context, name string) (*Endpoint, error) {
	return call[Endpoint](ctx, c, "GET", "/v1/endpoints/"+url.PathEscape(name), nil)
}

// DeleteEndpoint removes an endpoint.
func (c *Client) DeleteEndpoint(ctx context.Context, name string) error {
	return c.doJSON(ctx, "DELETE", "/v1/endpoints/"+url.PathEscape(name), nil, nil)
}

// RotateEndpointKey gives an endpoint a new key and answers it.
func (c *Client) RotateEndpointKey(ctx context.Context, name string) (*Endpoint, error) {
	return call[Endpoint](ctx, c, "POST", "/v1/endpoints/"+url.PathEscape(name)+"/rotate-key", nil)
}

// GetAsyncConfig is a function's asynchronous settings in force.
func (c *Client) GetAsyncConfig(ctx context.Context, function string) (*AsyncConfig, error) {
	return call[AsyncConfig](ctx, c, "GET", functionPath(function)+"/async", nil)
}

// SetAsyncConfig replaces a function's asynchronous settings.
func (c *Client) SetAsyncConfig(ctx context.Context, function string, req AsyncConfigRequest) (*AsyncConfig, error) {
	return call[AsyncConfig](ctx, c, "PUT", functionPath(function)+"/async", req)
}

// ResetAsyncConfig returns a function to the daemon's defaults.
func (c *Client) ResetAsyncConfig(ctx context.Context, function string) error {
	return c.doJSON(ctx, "DELETE", functionPath(function)+"/async", nil, nil)
}

// ListDeadLetters lists dead letters, oldest first (of one function, or
// all), up to max (0: all).
func (c *Client) ListDeadLetters(ctx context.Context, function string, max int) ([]DeadLetter, error) {
	q := url.Values{}
	if function != "" {
		q.Set("function", function)
	}
	return all[DeadLetter](ctx, c, "/v1/dead-letters", q, max)
}

// GetDeadLetter is the newest dead letter of an asynchronous invocation.
func (c *Client) GetDeadLetter(ctx context.Context, id string) (*DeadLetter, error) {
	return call[DeadLetter](ctx, c, "GET", "/v1/dead-letters/"+url.PathEscape(id), nil)
}

// ReplayDeadLetter queues a dead letter's event again.
func (c *Client) ReplayDeadLetter(ctx context.Context, id string) (*AsyncAccepted, error) {
	return call[AsyncAccepted](ctx, c, "POST", "/v1/dead-letters/"+url.PathEscape(id)+"/replay", nil)
}

// PurgeDeadLetters removes the dead letters of one function, or all.
func (c *Client) PurgeDeadLetters(ctx context.Context, function string) (*PurgeResult, error) {
	path := "/v1/dead-letters"
	if function != "" {
		path += "?function=" + url.QueryEscape(function)
	}
	return call[PurgeResult](ctx, c, "DELETE", path, nil)
}

// CreateSchedule creates a schedule.
func (c *Client) CreateSchedule(ctx context.Context, req CreateScheduleRequest) (*Schedule, error) {
	return call[Schedule](ctx, c, "POST", "/v1/schedules", req)
}

// ListSchedules lists the schedules.
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	return all[Schedule](ctx, c, "/v1/schedules", url.Values{}, 0)
}

// GetSchedule describes a schedule.
func (c *Client) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	return call[Schedule](ctx, c, "GET", "/v1/schedules/"+url.PathEscape(name), nil)
}

// DeleteSchedule removes a schedule.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.doJSON(ctx, "DELETE", "/v1/schedules/"+url.PathEscape(name), nil, nil)
}

// PauseSchedule pauses (true) or resumes (false) a schedule.
func (c *Client) PauseSchedule(ctx context.Context, name string, pause bool) (*Schedule, error) {
	act := map[bool]string{true: "pause", false: "resume"}[pause]
	return call[Schedule](ctx, c, "POST", "/v1/schedules/"+url.PathEscape(name)+"/"+act, nil)
}
