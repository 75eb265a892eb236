package agent

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRenewNoHookLine: the fill's renewal asks a protocol 6 agent to skip
// the hook on the plain line (secrets "-" when there are none); its answer
// tells the connection the agent's protocol.
func TestRenewNoHookLine(t *testing.T) {
	path, lines := restoreGuest(t, `{"ok":true,"hook":{"ran":false}}`)
	c := dial(t, path)
	entropy := bytes.Repeat([]byte{3}, 32)
	r, err := c.Renew(testCtx(t), Renewal{Entropy: entropy, NoHook: true})
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(<-lines)
	if len(f) != 6 || f[0] != "restore" || f[3] != hex.EncodeToString(entropy) || f[4] != "-" || f[5] != "nohook" {
		t.Fatalf("restore line %q", f)
	}
	if r.Hook == nil || r.Hook.Ran || c.Protocol() != ReadyProtocol {
		t.Errorf("reply %+v, protocol %d", r, c.Protocol())
	}
}

// restoreGuest is a guest that reads one restore line, hands it to lines
// and answers it with answer (the reply's fields after its id).
func restoreGuest(t *testing.T, answer string) (path string, lines chan string) {
	t.Helper()
	lines = make(chan string, 1)
	path = startGuest(t, func(g *guest) {
		l, err := g.rd.ReadString('\n')
		if err != nil {
			return
		}
		lines <- l
		g.send(reply(strings.Fields(l)[1], answer))
	})
	return path, lines
}

// TestRenewNoHookOlderAgent: an agent before protocol 6 refuses the line
// as malformed JSON; it gets today's line (its secrets included) and runs
// the hook, and the connection learns no protocol from it.
func TestRenewNoHookOlderAgent(t *testing.T) {
	lines := make(chan []string, 2)
	path := startGuest(t, func(g *guest) {
		for i := 0; ; i++ {
			l, err := g.rd.ReadString('\n')
			if err != nil {
				return
			}
			f := strings.Fields(l)
			lines <- f
			if i == 0 {
				g.send(`{"id":null,"ok":false,"duration_ms":0.0,"error":{"type":"BadRequest","message":"restore: want 'restore <id> <time_ns> <hex entropy> [<hex secrets>]'"}}`)
				continue
			}
			g.send(reply(f[1], `{"ok":true,"hook":{"ran":true,"ms":0.5},"secrets":1}`))
		}
	})
	c := dial(t, path)
	r, err := c.Renew(testCtx(t), Renewal{Entropy: bytes.Repeat([]byte{3}, 32), Secrets: []EnvVar{{"A", []byte("b")}}, NoHook: true})
	if err != nil {
		t.Fatal(err)
	}
	first, second := <-lines, <-lines
	if len(first) != 6 || len(second) != 5 || second[4] != hex.EncodeToString([]byte("A=b")) || second[1] == first[1] {
		t.Fatalf("lines %q then %q", first, second)
	}
	if !r.Hook.Ran || c.Protocol() != 0 {
		t.Errorf("reply %+v, protocol %d", r, c.Protocol())
	}
}

// TestRenewAndInvokeWithTheGuestAgent runs the dispatch's one line against
// the guest agent's own code: one request, the renewal's answer (the hook
// ran, after the clock and the entropy), then the invocation's, and the
// connection in step afterwards. The fill's renewal before it skips the
// hook, and the warm-up invocation answers its event.
func TestRenewAndInvokeWithTheGuestAgent(t *testing.T) {
	c, stderr, wait := guestAgent(t)
	ctx := testCtx(t)
	if _, err := c.Renew(ctx, Renewal{Entropy: bytes.Repeat([]byte{1}, 32), NoHook: true}); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if c.Protocol() != ReadyProtocol {
		t.Fatalf("protocol %d after a renewal without the hook", c.Protocol())
	}
	if err := c.WarmUp(ctx); err != nil {
		t.Fatalf("warm-up: %v\n%s", err, stderr.String())
	}
	entropy := bytes.Repeat([]byte{0x5a}, 32)
	r, p, err := c.RenewAndInvoke(ctx, Renewal{Entropy: entropy}, "probe", json.RawMessage(`{"a": "b c"}`))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	inv, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); !errors.Is(err, ErrWaited) {
		t.Errorf("second Wait: %v", err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("ping afterwards: %v", err)
	}
	wait()
	if !r.OK || !r.Hook.Ran || !inv.OK || string(inv.Result) != `{"a":"b c"}` || inv.Written.Before(r.Read) {
		t.Errorf("renewal %+v, invocation %+v", r, inv)
	}
	f := strings.Fields(stderr.String())
	// The fill's renewal: clock and entropy, no hook; the dispatch's: clock, entropy, hook.
	if len(f) != 9 || f[0] != "clock" || f[2] != "entropy" || f[4] != "clock" || f[7] != hex.EncodeToString(entropy) || f[8] != "hook" {
		t.Fatalf("agent saw %q", stderr.String())
	}
}

// TestRenewAndInvokeRefused: a renewal the agent refuses is an error and no
// invocation follows; the connection takes the next request.
func TestRenewAndInvokeRefused(t *testing.T) {
	c, stderr, wait := guestAgent(t)
	ctx := testCtx(t)
	if _, err := c.Ping(ctx); err != nil || c.Protocol() != ReadyProtocol {
		t.Fatalf("ping: %v, protocol %d", err, c.Protocol())
	}
	_, _, err := c.RenewAndInvoke(ctx, Renewal{Entropy: []byte{1, 2, 3, 4}}, "probe", json.RawMessage(`1`))
	if err == nil || !strings.Contains(err.Error(), "entropy must be 32") {
		t.Fatalf("err %v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if r, err := c.Ping(pctx); err != nil || r.Op != "pong" {
		t.Fatalf("ping after the refusal: %+v, %v", r, err)
	}
	wait()
	if s := stderr.String(); s != "" {
		t.Errorf("the agent did something: %q", s)
	}
}

// TestRenewAndInvokeOlderAgent: with an agent before protocol 6 (its ping
// says so) the dispatch takes two round trips, the renewal's plain line
// and then the invoke request.
func TestRenewAndInvokeOlderAgent(t *testing.T) {
	got := make(chan string, 3)
	path := startGuest(t, func(g *guest) {
		for {
			l, err := g.rd.ReadString('\n')
			if err != nil {
				return
			}
			got <- l
			if f := strings.Fields(l); f[0] == "restore" {
				g.send(reply(f[1], `{"ok":true,"hook":{"ran":true}}`))
				continue
			}
			var req request
			if err := json.Unmarshal([]byte(l), &req); err != nil {
				t.Errorf("not JSON: %q", l)
				return
			}
			if req.Op == "ping" {
				g.send(reply(req.ID, `{"ok":true,"op":"pong","agent":"thaw-agent/5"}`))
				continue
			}
			g.send(reply(req.ID, `{"ok":true,"duration_ms":0.1,"result":`+string(req.Event)+`}`))
		}
	})
	c := dial(t, path)
	ctx := testCtx(t)
	if _, err := c.Ping(ctx); err != nil || c.Protocol() != 5 {
		t.Fatalf("ping: %v, protocol %d", err, c.Protocol())
	}
	<-got
	r, p, err := c.RenewAndInvoke(ctx, Renewal{Entropy: bytes.Repeat([]byte{1}, 32)}, "hello", json.RawMessage(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if l := <-got; len(strings.Fields(l)) != 4 {
		t.Fatalf("renewal line %q", l)
	}
	inv, err := p.Wait(ctx)
	if err != nil || !r.Hook.Ran || string(inv.Result) != `{"n":1}` {
		t.Fatalf("renewal %+v, invocation %+v, %v", r, inv, err)
	}
	if l := <-got; !strings.Contains(l, `"op":"invoke"`) {
		t.Fatalf("second request %q", l)
	}
}

func TestProtocolOf(t *testing.T) {
	for agent, want := range map[string]int{"thaw-agent/6": 6, "thaw-agent/12": 12, "thaw-agent/": 0, "other/6": 0, "": 0,
		"thaw-agent/-1": 0, "thaw-agent/6x": 0} {
		if got := protocolOf(agent); got != want {
			t.Errorf("protocolOf(%q) = %d, want %d", agent, got, want)
		}
	}
}

// TestRenewAndInvokeEventSent: once the one-line dispatch reached the
// agent, a failure the agent did not answer as a refused renewal (an
// answer that set fewer secrets than sent, or no answer at all) says the
// event may have begun (ErrEventSent), so the caller does not run it
// elsewhere; a refused renewal does not say so (the agent invokes nothing).
func TestRenewAndInvokeEventSent(t *testing.T) {
	for _, c := range []struct {
		name, answer string
		sent         bool
	}{
		{"fewer secrets", `{"ok":true,"hook":{"ran":true},"secrets":0}`, true},
		{"no answer", "", true},
		{"refused", `{"ok":false,"error":{"type":"BadRequest","message":"no"}}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := startGuest(t, func(g *guest) {
				for {
					l, err := g.rd.ReadString('\n')
					if err != nil {
						return
					}
					if f := strings.Fields(l); f[0] == "restore" {
						if c.answer != "" {
							g.send(reply(f[1], c.answer))
						}
						continue
					}
					var req request
					if json.Unmarshal([]byte(l), &req) == nil && req.Op == "ping" {
						g.send(reply(req.ID, `{"ok":true,"op":"pong","agent":"thaw-agent/6"}`))
					}
				}
			})
			conn := dial(t, path)
			ctx := testCtx(t)
			if _, err := conn.Ping(ctx); err != nil || conn.Protocol() != ReadyProtocol {
				t.Fatalf("ping: %v, protocol %d", err, conn.Protocol())
			}
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			rn := Renewal{Entropy: bytes.Repeat([]byte{1}, 32), Secrets: []EnvVar{{"A", []byte("b")}}}
			_, _, err := conn.RenewAndInvoke(rctx, rn, "hello", json.RawMessage(`1`))
			if err == nil || errors.Is(err, ErrEventSent) != c.sent {
				t.Fatalf("err %v, want event sent %v", err, c.sent)
			}
		})
	}
}
