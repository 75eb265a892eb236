package agent

import (
	"testing"
)

// An agent before ReadyProtocol warms up by refusing the warm-up function
// (FunctionNotFound); one that runs it instead, or refuses it otherwise,
// fails the warm-up.
func TestWarmUpOlderAgent(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		ok           bool
	}{
		{"refused", `{"ok":false,"error":{"type":"FunctionNotFound","message":"no function thaw:warm-up"}}`, true},
		{"ran", `{"ok":true,"result":null}`, false},
		{"failed otherwise", `{"ok":false,"error":{"type":"ImportError","message":"boom"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := startGuest(t, func(g *guest) {
				for {
					req, ok := g.next()
					if !ok {
						return
					}
					if req.Op == "ping" {
						g.send(reply(req.ID, `{"ok":true,"op":"pong","agent":"thaw-agent/5"}`))
						continue
					}
					if req.Function != WarmUpFunction || len(req.Event) != 0 && string(req.Event) != "null" {
						t.Errorf("warm-up request %+v", req)
					}
					g.send(reply(req.ID, tc.answer))
				}
			})
			err := dial(t, path).WarmUp(testCtx(t))
			if (err == nil) != tc.ok {
				t.Fatalf("warm-up: %v, want ok %v", err, tc.ok)
			}
		})
	}
}
