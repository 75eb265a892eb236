package agent

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Protocol 6 (agent "thaw-agent/6") is what a ready clone needs from its
// agent: a renewal without the function's on_restore hook (the clone's
// fill; the dispatch renews it again and runs the hook then, once), a
// renewal and an invocation on one line (the dispatch: one round trip),
// and a built-in function for the fill's warm-up:
//
//	host -> guest  restore 9 <ns> <entropy, hex> <secrets, hex, or -> nohook
//	guest -> host  {"id":"9","ok":true,...,"hook":{"ran":false},...}
//	host -> guest  restore 10 <ns> <entropy, hex> <secrets, hex, or -> invoke {"id":"11","op":"invoke",...}
//	guest -> host  {"id":"10","ok":true,...}              the renewal's answer, then
//	               {"id":"11","ok":true,"result":...}     the invocation's
//
// The agent invokes only after a renewal that succeeded. Older agents
// refuse both lines as malformed JSON (id null).

// ReadyProtocol is the first agent protocol with the requests above.
const ReadyProtocol = 6

// WarmUpFunction is the function a ready clone's warm-up invokes: no
// function can be called so (a colon separates a version). An agent of
// ReadyProtocol runs a built-in handler that returns its event, through
// the path a function's invocation takes, and leaves the function's output
// for the next invocation; older agents refuse it (FunctionNotFound)
// before any handler runs.
const WarmUpFunction = "thaw:warm-up"

// Renewal is what a restore request gives a clone: entropy for its RNGs,
// the function's secrets, and whether its on_restore hook runs.
type Renewal struct {
	Entropy []byte
	Secrets []EnvVar
	// NoHook: the hook does not run (ReadyProtocol). An older agent
	// runs it all the same.
	NoHook bool
}

// Protocol is the agent's protocol as learned from its answers (a ping's,
// or a renewal of ReadyProtocol that succeeded); 0 while unknown.
func (c *Conn) Protocol() int { return int(c.proto.Load()) }

// learn records the agent's protocol p (0: nothing learned).
func (c *Conn) learn(p int) {
	if p > 0 {
		c.proto.Store(int32(p))
	}
}

// protocolOf is the protocol in an agent's name ("thaw-agent/6"); 0 if
// there is none.
func protocolOf(agent string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(agent, "thaw-agent/"))
	if err != nil || !strings.HasPrefix(agent, "thaw-agent/") || n < 0 {
		return 0
	}
	return n
}

// Renew sends a restored guest its renewal (the plain-line restore
// request; see Restore and RestoreWithSecrets). With NoHook the line asks
// the agent to skip the hook; an agent that refuses that line (before
// ReadyProtocol) gets the request without it and runs the hook.
func (c *Conn) Renew(ctx context.Context, rn Renewal) (*Reply, error) {
	if rn.NoHook {
		r, err := c.exchange(ctx, func(id string) ([]byte, error) { return rn.line(id, "nohook"), nil }, true)
		if !errors.Is(err, errPlainRefused) {
			r, err = rn.check(r, err)
			if err == nil {
				c.learn(max(c.Protocol(), ReadyProtocol))
			}
			return r, err
		}
	}
	r, err := c.exchange(ctx, func(id string) ([]byte, error) { return rn.line(id, ""), nil }, true)
	switch {
	case errors.Is(err, errPlainRefused) && len(rn.Secrets) > 0:
		return nil, ErrNoSecrets
	case errors.Is(err, errPlainRefused):
		r, err = c.call(ctx, map[string]any{"op": "restore", "entropy": rn.Entropy, "time_ns": timeNow{}})
	}
	return rn.check(r, err)
}

// line is the plain-line restore request with id; mode ("nohook",
// "invoke"), if set, follows the secrets ("-" if there are none).
func (rn Renewal) line(id, mode string) []byte {
	b := fmt.Appendf(nil, "restore %s %d %s", id, time.Now().UnixNano(), hex.EncodeToString(rn.Entropy))
	if len(rn.Secrets) > 0 {
		var blob []byte
		for i, s := range rn.Secrets {
			if i > 0 {
				blob = append(blob, 0)
			}
			blob = append(append(append(blob, s.Name...), '='), s.Value...)
		}
		b = append(append(b, ' '), hex.EncodeToString(blob)...)
	} else if mode != "" {
		b = append(b, " -"...)
	}
	if mode != "" {
		b = append(append(b, ' '), mode...)
	}
	return b
}

// check turns a renewal's answer that is not ok, or that set fewer
// secrets than it was sent, into an error.
func (rn Renewal) check(r *Reply, err error) (*Reply, error) {
	r, err = checkReply("restore", r, err)
	if err == nil && r.Secrets != len(rn.Secrets) {
		if r.Secrets == 0 {
			return nil, ErrNoSecrets
		}
		return nil, fmt.Errorf("restore: the guest set %d of %d secrets", r.Secrets, len(rn.Secrets))
	}
	return r, err
}

// Pending is an invocation whose answer is still to come (RenewAndInvoke).
type Pending struct {
	c        *Conn
	id       string // the invocation's request id; "" if it is not sent yet
	since    time.Time
	function string
	event    json.RawMessage
	waited   bool
}

// RenewAndInvoke renews a ready clone (the hook runs) and invokes function
// on event: on one line for an agent of ReadyProtocol (Protocol), as Renew
// and then Invoke otherwise. It returns the renewal's answer; the
// invocation's comes from Pending.Wait, which must then be called once: the
// connection takes no other request until then. If the renewal failed, no
// invocation follows.
func (c *Conn) RenewAndInvoke(ctx context.Context, rn Renewal, function string, event json.RawMessage) (*Reply, *Pending, error) {
	if c.Protocol() < ReadyProtocol || rn.NoHook {
		r, err := c.Renew(ctx, rn)
		if err != nil {
			return nil, nil, err
		}
		return r, &Pending{c: c, function: function, event: event}, nil
	}
	c.mu.Lock()
	rid, iid := c.nextID(), c.nextID()
	req := c.invokeRequest(function, event)
	req["id"] = iid
	b, err := json.Marshal(req)
	if err != nil {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("encode request: %w", err)
	}
	r, err := c.renewFirst(ctx, rid, append(append(rn.line(rid, "invoke"), ' '), b...), rn)
	if err != nil {
		c.mu.Unlock()
		return nil, nil, err
	}
	return r, &Pending{c: c, id: iid, since: r.Read}, nil
}

// renewFirst writes a renewal-and-invocation line and reads the renewal's
// answer (c.mu held).
func (c *Conn) renewFirst(ctx context.Context, rid string, line []byte, rn Renewal) (*Reply, error) {
	defer c.deadline(ctx)()
	written, err := c.write(line)
	if err != nil {
		return nil, err
	}
	r, err := c.await(rid, written, false)
	if err != nil { // no answer: the agent may have renewed and begun the event
		return nil, fmt.Errorf("%w: %w", ErrEventSent, err)
	}
	renewedOK := r.OK // an agent that renewed invokes next, whatever the daemon makes of the answer
	if r, err = rn.check(r, nil); err != nil && renewedOK {
		err = fmt.Errorf("%w: %w", ErrEventSent, err)
	}
	return r, err
}

// ErrEventSent: a renewal sent with its event on one line failed after the
// line reached the agent, which may have begun the event (it did unless it
// answered that the renewal failed). Running the event elsewhere could run
// it twice: the caller stops the clone and fails the request instead.
var ErrEventSent = errors.New("agent: the event went with the renewal and may have begun")

// Abandon releases the connection without the invocation's answer (a VM
// that is being stopped: the connection is out of step after it).
func (p *Pending) Abandon() {
	if !p.waited && p.id != "" {
		p.c.mu.Unlock()
	}
	p.waited = true
}

// ErrWaited: Pending.Wait was called a second time.
var ErrWaited = errors.New("agent: the invocation's answer was read already")

// Wait reads the invocation's answer, as Invoke returns it; its Written is
// when the renewal's answer was read (the agent invokes from there on).
func (p *Pending) Wait(ctx context.Context) (*Reply, error) {
	if p.waited {
		return nil, ErrWaited
	}
	p.waited = true
	if p.id == "" {
		return p.c.Invoke(ctx, p.function, p.event)
	}
	defer p.c.mu.Unlock()
	defer p.c.deadline(ctx)()
	return p.c.invoked(p.c.await(p.id, p.since, false))
}
