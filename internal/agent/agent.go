// Package agent is the host side of the guest agent protocol: newline-
// delimited JSON over the VM's virtio-serial port (a Unix socket on the host).
//
//	host -> guest  {"id":"7","op":"ping"}
//	guest -> host  {"id":"7","ok":true,"op":"pong","function":"hello",...}
//	host -> guest  {"id":"8","op":"invoke","function":"hello","event":{...}}
//	guest -> host  {"id":"8","ok":true,"result":...,"duration_ms":1.2}
//	               {"id":"8","ok":false,"error":{"type":..,"message":..,"traceback":..}}
//
// Requests are answered in order, one at a time. Lines whose id is not the
// one awaited (late answers to earlier pings, the agent's "ready" event) are
// skipped. A reply's result streams to a spill as it arrives (reply.go),
// bounded by MaxResult, which the invoke request tells the agent
// ("max_result"); agents that send the result last (protocol 3) let the
// host decode everything else first, but any order is accepted. The restore request alone is a plain line, so that a clone's
// first request takes the fewest code paths in the guest:
//
//	host -> guest  restore 9 <CLOCK_REALTIME ns> <entropy, hex> [<secrets, hex>]
//	guest -> host  {"id":"9","ok":true,"clock_step_ms":...,"reseeded":[...],"hook":{...},"secrets":N,...}
//
// The secrets (protocol 4, agent "thaw-agent/4") are NAME=VALUE entries
// joined by NUL bytes, in hex; the guest sets them in its environment
// before the function's on_restore hook runs. Invoke replies carry what
// the invocation wrote (protocol 5, logs.go). Protocol 6 (renew.go) renews
// a ready clone without its hook, or renews and invokes on one line, and
// runs a built-in no-op function for the ready clone's warm-up.
package agent

import (
	"github.com/thaw-dev/thaw/wire"

	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTimeout is returned when the guest does not answer in time.
var ErrTimeout = errors.New("guest agent did not answer in time")

// Error is an exception a handler raised (part of the API).
type Error = wire.FunctionError

// Reply is one answer from the guest.
type Reply struct {
	ID string `json:"id"`
	OK bool   `json:"ok"`
	Op string `json:"op,omitempty"`
	// Agent is the agent's name and protocol ("thaw-agent/6"; ping).
	Agent    string  `json:"agent,omitempty"`
	Event    string  `json:"event,omitempty"`
	Function *string `json:"function,omitempty"`
	// FunctionError (ping, ready) says why the function cannot be invoked:
	// its import or its dependency layer failed.
	FunctionError *Error          `json:"function_error,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	Error         *Error          `json:"error,omitempty"`
	DurationMS    float64         `json:"duration_ms,omitempty"`
	// restore and clock.
	ClockStepMS float64     `json:"clock_step_ms,omitempty"`
	Reseeded    []string    `json:"reseeded,omitempty"`
	Hook        *HookResult `json:"hook,omitempty"`
	// Secrets is how many secrets a restore set in the guest's
	// environment; Env, in a ping's answer, how many environment
	// variables the agent set at boot (absent: an agent before protocol
	// 3, which sets none).
	Secrets int  `json:"secrets,omitempty"`
	Env     *int `json:"env,omitempty"`
	// Steps is the guest's account of a restore, in ms (see
	// wire.RestoreTiming.AgentSteps).
	Steps map[string]float64 `json:"steps,omitempty"`
	// Logs is what an invocation wrote (logs.go); nil from agents before
	// protocol 5.
	Logs *Logs `json:"logs,omitempty"`
	// Written is when the request was written to the channel, Read when
	// this answer's line had been read (host clock).
	Written time.Time `json:"-"`
	Read    time.Time `json:"-"`
}

// HookResult says what the function's on_restore hook did.
type HookResult struct {
	Ran   bool    `json:"ran"`
	MS    float64 `json:"ms,omitempty"`
	Error *Error  `json:"error,omitempty"`
}

// Conn is a connection to one guest agent.
type Conn struct {
	conn     net.Conn
	rd       *bufio.Reader
	mu       sync.Mutex
	next     int
	spillDir string
	// maxResult and maxEnvelope bound each reply (MaxResult and
	// MaxEnvelope but in tests); maxLogs an invocation's output (SetMaxLogs).
	maxResult, maxEnvelope int
	maxLogs                int
	// proto is the agent's protocol as learned (Protocol); 0 until known.
	proto atomic.Int32
}

// NewConn speaks the protocol over an already connected channel (the VMM
// hands the daemon its end at start).
func NewConn(c net.Conn) *Conn {
	return &Conn{conn: c, rd: bufio.NewReaderSize(c, 64<<10), maxResult: MaxResult,
		maxEnvelope: MaxEnvelope + 6*(DefaultMaxLogs+maxKernelLog), maxLogs: DefaultMaxLogs}
}

// SpillTo sets where results too large to read into memory as they arrive
// are held until they are whole (by default the system's temporary
// directory). Files there have no name: nothing is left behind.
func (c *Conn) SpillTo(dir string) { c.spillDir = dir }

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

// errPlainRefused: the agent answered a plain-line request as malformed
// JSON (an agent before protocol 2, from an older image).
var errPlainRefused = errors.New("agent does not take plain-line requests")

// call sends one JSON request and waits for the reply with the same id.
func (c *Conn) call(ctx context.Context, req map[string]any) (*Reply, error) {
	return c.exchange(ctx, func(id string) ([]byte, error) {
		req["id"] = id
		return json.Marshal(req)
	}, false)
}

// exchange sends the line encode makes for the next id and waits for the
// reply with that id. plain: the line is not JSON, and an answer without an
// id that calls it a bad request is errPlainRefused.
func (c *Conn) exchange(ctx context.Context, encode func(id string) ([]byte, error), plain bool) (*Reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextID()
	b, err := encode(id)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	defer c.deadline(ctx)()
	written, err := c.write(b)
	if err != nil {
		return nil, err
	}
	return c.await(id, written, plain)
}

// nextID is the next request's id (c.mu held).
func (c *Conn) nextID() string {
	c.next++
	return strconv.Itoa(c.next)
}

// deadline bounds the channel's reads and writes by ctx's deadline until
// the function it returns is called.
func (c *Conn) deadline(ctx context.Context) func() {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(24 * time.Hour)
	}
	_ = c.conn.SetDeadline(deadline)
	return func() { _ = c.conn.SetDeadline(time.Time{}) }
}

// write sends one request line; it returns when it was written.
func (c *Conn) write(line []byte) (time.Time, error) {
	if _, err := c.conn.Write(append(line, '\n')); err != nil {
		return time.Time{}, c.ioErr("write", err)
	}
	return time.Now(), nil
}

// await reads replies until the one with id (see exchange).
func (c *Conn) await(id string, written time.Time, plain bool) (*Reply, error) {
	for {
		r, err := c.readReply()
		var tl *TooLargeError
		if errors.As(err, &tl) && tl.ID != "" && tl.ID != id {
			continue // an earlier request's
		}
		if err != nil {
			return nil, err
		}
		if r.ID == id {
			r.Written, r.Read = written, time.Now()
			return r, nil
		}
		if plain && r.ID == "" && !r.OK && r.Error != nil && r.Error.Type == "BadRequest" {
			return nil, errPlainRefused
		}
	}
}

func (c *Conn) ioErr(op string, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTimeout
	}
	return fmt.Errorf("agent %s: %w", op, err)
}

// Ping asks the agent whether it is up. Its answer tells the connection
// the agent's protocol (Protocol).
func (c *Conn) Ping(ctx context.Context) (*Reply, error) {
	r, err := c.call(ctx, map[string]any{"op": "ping"})
	r, err = checkReply("ping", r, err)
	if err == nil {
		c.learn(protocolOf(r.Agent))
	}
	return r, err
}

// WaitReady pings every interval until the agent answers or ctx ends. Pings
// sent before the guest opened its port queue up in the socket; their late
// answers are skipped by id.
func (c *Conn) WaitReady(ctx context.Context, interval time.Duration) (*Reply, error) {
	for {
		pctx, cancel := context.WithTimeout(ctx, interval)
		r, err := c.Ping(pctx)
		cancel()
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("guest agent not ready: %w", ctx.Err())
		}
		if !errors.Is(err, ErrTimeout) {
			return nil, err
		}
	}
}

// Restore tells a restored guest it is a new clone: the host's time (read
// as the request is sent) for its clock, and entropy for its kernel RNG;
// the agent also reseeds Python's generators and runs the function's
// on_restore hook. A hook that raised is reported in Reply.Hook. An agent
// that refuses the plain-line request is asked again in JSON.
func (c *Conn) Restore(ctx context.Context, entropy []byte) (*Reply, error) {
	return c.RestoreWithSecrets(ctx, entropy, nil)
}

// EnvVar is an environment variable a restore sets in the guest.
type EnvVar struct {
	Name  string
	Value []byte
}

// ErrNoSecrets: the guest's agent predates secret delivery (protocol 4);
// its snapshot was taken with an older guest image.
var ErrNoSecrets = errors.New("the guest agent cannot take secrets (it predates protocol 4): take a new snapshot with the current guest image")

// RestoreWithSecrets is Restore that also sets secrets in the guest's
// environment before the on_restore hook runs. Names must be environment
// variable names and values free of NUL bytes (the caller checked them);
// a guest that does not take secrets, or sets fewer than it was sent, is
// an error and nothing is retried without them.
func (c *Conn) RestoreWithSecrets(ctx context.Context, entropy []byte, secrets []EnvVar) (*Reply, error) {
	return c.Renew(ctx, Renewal{Entropy: entropy, Secrets: secrets})
}

// Clock sets the guest's clock to the host's (after a pause).
func (c *Conn) Clock(ctx context.Context) (*Reply, error) {
	return c.checked(ctx, "clock", map[string]any{"op": "clock", "time_ns": timeNow{}})
}

// timeNow encodes as the host's CLOCK_REALTIME in nanoseconds at the
// moment the request is encoded, just before it is written.
type timeNow struct{}

func (timeNow) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, time.Now().UnixNano(), 10), nil
}

func (c *Conn) checked(ctx context.Context, op string, req map[string]any) (*Reply, error) {
	r, err := c.call(ctx, req)
	return checkReply(op, r, err)
}

// checkReply turns a reply that is not ok into an error.
func checkReply(op string, r *Reply, err error) (*Reply, error) {
	if err != nil {
		return nil, err
	}
	if !r.OK {
		if r.Error == nil {
			return r, fmt.Errorf("%s: guest reported failure without details", op)
		}
		return r, fmt.Errorf("%s: %w", op, r.Error)
	}
	return r, nil
}

// Invoke runs the function's handler on event. A handler error is returned
// in Reply.Error with ok=false and a nil error: the guest is healthy. So is
// a result over MaxResult (error type ResultTooLarge), whether the agent
// refused to send it or the host stopped reading it.
func (c *Conn) Invoke(ctx context.Context, function string, event json.RawMessage) (*Reply, error) {
	r, err := c.call(ctx, c.invokeRequest(function, event))
	return c.invoked(r, err)
}

// invokeRequest is the invoke request of function on event.
func (c *Conn) invokeRequest(function string, event json.RawMessage) map[string]any {
	if len(event) == 0 {
		event = json.RawMessage("null")
	}
	return map[string]any{"op": "invoke", "function": function, "event": event, "max_result": c.maxResult,
		"max_logs": c.maxLogs}
}

// invoked is Invoke's answer from the reply to an invoke request.
func (c *Conn) invoked(r *Reply, err error) (*Reply, error) {
	var tl *TooLargeError
	if errors.As(err, &tl) {
		return &Reply{ID: tl.ID, Error: &Error{Type: tooLargeType[tl.Part], Message: tl.Error()}}, nil
	}
	if err == nil && r.Logs != nil {
		r.Logs.bound(c.maxLogs)
	}
	return r, err
}

// tooLargeType is the error type a reply over its limit is reported as.
var tooLargeType = map[string]string{"result": "ResultTooLarge", "reply": "ReplyTooLarge"}
