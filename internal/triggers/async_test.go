package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/wire"
)

func asyncState(t *testing.T, tr *Triggers, id string) *wire.AsyncInvocation {
	t.Helper()
	st, err := tr.GetAsync(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func waitDone(t *testing.T, tr *Triggers, id string, d time.Duration) *wire.AsyncInvocation {
	t.Helper()
	var st *wire.AsyncInvocation
	waitFor(t, d, "invocation "+id+" done", func() bool {
		st = asyncState(t, tr, id)
		return st.State == wire.AsyncSucceeded || st.State == wire.AsyncFailed
	})
	return st
}

func TestAsyncRetriesThenDeadLetterThenReplay(t *testing.T) {
	inv := newTestInvoker()
	inv.set("fail", raises)
	tr := openTest(t, "", inv, func(c *Config) { c.Backoff = 200 * time.Millisecond })
	ctx := context.Background()
	three := 3
	if _, err := tr.PutAsyncConfig(ctx, wire.AsyncConfig{Function: "fail", AsyncConfigRequest: wire.AsyncConfigRequest{MaxRetries: &three}}); err != nil {
		t.Fatal(err)
	}
	acc, err := tr.Enqueue(ctx, EnqueueRequest{Function: "fail", Event: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	st := waitDone(t, tr, acc.ID, 20*time.Second)
	calls := inv.callsOf("fail")
	if st.State != wire.AsyncFailed || st.Attempts != 4 || len(calls) != 4 || len(st.Invocations) != 4 {
		t.Fatalf("state %+v after %d calls; want failed after 1+3 attempts", st, len(calls))
	}
	// Gaps grow: retry n waits between base*2^(n-1)/2 and base*2^(n-1).
	for i := 1; i < len(calls); i++ {
		gap := calls[i].at.Sub(calls[i-1].at)
		lo := 100 * time.Millisecond << (i - 1)
		if gap < lo {
			t.Errorf("gap %d is %s, want at least %s", i, gap, lo)
		}
	}
	dls, err := tr.ListDeadLetters(ctx, "fail", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Outcome.ID != acc.ID || dls[0].Outcome.Condition != "failure" || dls[0].Outcome.Attempts != 4 ||
		dls[0].Outcome.Invocation == nil || dls[0].Outcome.Invocation.Error.Type != "ValueError" || string(dls[0].Outcome.Event) != `{"n":1}` {
		t.Fatalf("dead letters: %+v", dls)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(inv.callsOf("fail")); n != 4 {
		t.Fatalf("%d calls after the dead letter", n)
	}
	// Replay runs it again, as a new invocation, and takes the dead letter away.
	inv.set("fail", ok(`"fixed"`))
	re, err := tr.ReplayDeadLetter(ctx, acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := waitDone(t, tr, re.ID, 10*time.Second); st.State != wire.AsyncSucceeded || st.Attempts != 1 {
		t.Fatalf("replay: %+v", st)
	}
	if dls, _ := tr.ListDeadLetters(ctx, "fail", 0, 100); len(dls) != 0 {
		t.Fatalf("dead letter kept after replay: %+v", dls)
	}
	if _, err := tr.ReplayDeadLetter(ctx, acc.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second replay: %v", err)
	}
}

func TestAsyncIdempotencyKey(t *testing.T) {
	inv := newTestInvoker()
	inv.set("echo", echo)
	tr := openTest(t, "", inv, nil)
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		acc, err := tr.Enqueue(ctx, EnqueueRequest{Function: "echo", Event: json.RawMessage(`{}`), IdempotencyKey: "order-42"})
		if err != nil {
			t.Fatal(err)
		}
		if acc.Duplicate != (i > 0) {
			t.Fatalf("request %d: duplicate=%v", i, acc.Duplicate)
		}
		ids = append(ids, acc.ID)
		if i == 2 {
			waitDone(t, tr, acc.ID, 10*time.Second) // a repeat after it ran is one too
		}
	}
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("ids differ: %v", ids)
		}
	}
	waitDone(t, tr, ids[0], 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	if n := len(inv.callsOf("echo")); n != 1 {
		t.Fatalf("%d runs of one idempotency key", n)
	}
	// The same key for another function is another invocation.
	inv.set("other", echo)
	acc, _ := tr.Enqueue(ctx, EnqueueRequest{Function: "other", Event: json.RawMessage(`{}`), IdempotencyKey: "order-42"})
	if acc.ID == ids[0] || acc.Duplicate {
		t.Fatalf("key shared across functions: %+v", acc)
	}
	for _, bad := range []EnqueueRequest{{Function: "echo", IdempotencyKey: "has space"}, {Function: "echo", Event: json.RawMessage(`{`)},
		{Function: "ghost"}, {Function: "Bad!"}} {
		if _, err := tr.Enqueue(ctx, bad); !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotFound) {
			t.Errorf("enqueue %+v: %v", bad, err)
		}
	}
}

func TestAsyncDestinationsWebhook(t *testing.T) {
	inv := newTestInvoker()
	inv.set("good", ok(`{"v":1}`))
	inv.set("bad", raises)
	var mu sync.Mutex
	got := map[string]wire.Outcome{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var o wire.Outcome
		if err := json.Unmarshal(b, &o); err != nil || r.Header.Get("X-Thaw-Async-Id") != o.ID {
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		got[o.ID] = o
		mu.Unlock()
	}))
	defer hook.Close()
	hp := strings.TrimPrefix(hook.URL, "http://")
	tr := openTest(t, "", inv, func(c *Config) { c.DestinationAllow = []string{hp} })
	ctx := context.Background()
	zero := 0
	for _, fn := range []string{"good", "bad"} {
		if _, err := tr.PutAsyncConfig(ctx, wire.AsyncConfig{Function: fn, AsyncConfigRequest: wire.AsyncConfigRequest{MaxRetries: &zero, OnSuccess: hook.URL + "/ok", OnFailure: hook.URL + "/fail"}}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for i := range 10 {
		fn := []string{"good", "bad"}[i%2]
		acc, err := tr.Enqueue(ctx, EnqueueRequest{Function: fn, Event: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, acc.ID)
	}
	waitFor(t, 20*time.Second, "every outcome at the webhook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(ids)
	})
	for i, id := range ids {
		want := []string{"success", "failure"}[i%2]
		if got[id].Condition != want {
			t.Errorf("%s: condition %q, want %q", id, got[id].Condition, want)
		}
	}
	// A webhook the rules do not allow is refused at configuration...
	for _, dest := range []string{"http://127.0.0.1:1/x", "ftp://x/y", "http://user:pw@" + hp + "/"} {
		if _, err := tr.PutAsyncConfig(ctx, wire.AsyncConfig{Function: "good", AsyncConfigRequest: wire.AsyncConfigRequest{OnSuccess: dest}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("destination %s: %v", dest, err)
		}
	}
	// ...and at the dial, for a name that resolves to a refused address.
	d := newDestinations(Config{AllowPublicDestinations: true}, tr.e, tr.m, testLog(t))
	if err := d.webhook(ctx, "http://localhost:9/x", &wire.Outcome{ID: "async-00"}); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("webhook to loopback by name: %v", err)
	}
}

func TestAsyncSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	inv := newTestInvoker()
	block := make(chan struct{})
	inv.set("echo", func(ev json.RawMessage) (*wire.Invocation, error) {
		<-block
		return &wire.Invocation{OK: true, Result: ev}, nil
	})
	cfg := Config{DataDir: dir, NodeName: "n1", AckWait: time.Second}
	tr, err := Open(context.Background(), cfg, inv, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	for range 20 {
		acc, err := tr.Enqueue(ctx, EnqueueRequest{Function: "echo", Event: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, acc.ID)
	}
	tr.Close() // never started: everything is still queued
	close(block)
	tr = openTest(t, dir, inv, func(c *Config) { *c = cfg })
	for _, id := range ids {
		if st := waitDone(t, tr, id, 20*time.Second); st.State != wire.AsyncSucceeded {
			t.Fatalf("%s: %+v", id, st)
		}
	}
}
