package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/api/apitest"
	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/internal/tcptest"
)

// The triggers on the real daemon binary: endpoints over HTTP (Go's
// client and curl), asynchronous invocations through a kill -9 of
// thawd, retries into the dead letters, webhooks, and a schedule.

// tokenFile writes a random API token to a 0600 file.
func tokenFile(t *testing.T) (path, token string) {
	t.Helper()
	var b [32]byte
	_, _ = rand.Read(b[:])
	token = hex.EncodeToString(b[:])
	path = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, token
}

// checkedClient is a client of the daemon on sock whose every answer is
// checked against openapi.json.
func checkedClient(t *testing.T, sock string) *client.Client {
	t.Helper()
	check, err := apitest.Load(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	return client.New("unix:"+sock, client.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
		return &apitest.Transport{Checker: check, Base: rt, Report: t.Errorf}
	}))
}

// webDaemon starts thawd on dataDir with args, returns it with a checked
// client, and deploys e2e/testdata/web as name.
func webDaemon(t *testing.T, dataDir, name string, args ...string) (*thawd, *client.Client) {
	t.Helper()
	d, err := startThawd(t, dataDir, args...)
	if err != nil {
		t.Fatal(err)
	}
	c := checkedClient(t, d.sock)
	deployWeb(t, c, name)
	return d, c
}

// deployWeb deploys e2e/testdata/web as name.
func deployWeb(t *testing.T, c *client.Client, name string) {
	t.Helper()
	if _, err := c.DeployFromDir(ctxT(t), name, repoPath("e2e/testdata/web"), client.DeployRequest{}); err != nil {
		t.Fatalf("deploy %s: %v", name, err)
	}
}

func httpGet(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func curl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("curl", append([]string{"-s", "-S", "--max-time", "60"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v: %s", args, err, out)
	}
	return string(out)
}

func TestEndpointOverHTTP(t *testing.T) {
	parallel(t)
	addr := tcptest.FreeAddr(t)
	tokPath, token := tokenFile(t)
	d, c := webDaemon(t, t.TempDir(), "web", "--functions-listen", addr, "--token-file", tokPath)
	ctx := ctxT(t)
	ep, err := c.CreateEndpoint(ctx, client.CreateEndpointRequest{Function: "web", Auth: "key", PathPrefix: "/api/web"})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	req, _ := http.NewRequest("POST", base+"/api/web/items?name=go", strings.NewReader("12345"))
	req.Header.Set("Authorization", "Bearer "+ep.Key)
	resp, body := httpGet(t, req)
	if resp.StatusCode != 200 || body != "hi go (POST 5)" || resp.Header.Get("X-Path") != "/api/web/items" || resp.Header.Get("X-Thaw-Invocation-Id") == "" {
		t.Fatalf("go client: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if out := curl(t, "-H", "X-Thaw-Key: "+ep.Key, base+"/api/web?name=curl"); out != "hi curl (GET 0)" {
		t.Fatalf("curl: %q", out)
	}
	if out := curl(t, "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "-H", "X-Thaw-Key: "+ep.Key, base+"/api/web"); out != "2 200" {
		t.Fatalf("h2c: %q", out)
	}
	for _, c := range []struct {
		name, header, value, path string
		body                      io.Reader
		want                      int
		has                       string
	}{
		{"no key", "", "", "/api/web", nil, 401, "unauthorized"},
		{"wrong key", "X-Thaw-Key", ep.Key[:len(ep.Key)-2] + "xx", "/api/web", nil, 401, "unauthorized"},
		{"admin token", "Authorization", "Bearer " + token, "/api/web", nil, 403, "not accepted here"},
		{"unknown endpoint", "X-Thaw-Key", ep.Key, "/api/other", nil, 404, "no_endpoint"},
		{"oversized body", "X-Thaw-Key", ep.Key, "/api/web", bytes.NewReader(make([]byte, 7<<20)), 413, "too_large"},
		{"handler error", "X-Thaw-Key", ep.Key, "/api/web?fail=1", nil, 502, "function_error"},
	} {
		req, _ := http.NewRequest("POST", base+c.path, c.body)
		if c.header != "" {
			req.Header.Set(c.header, c.value)
		}
		resp, body := httpGet(t, req)
		if resp.StatusCode != c.want || !strings.Contains(body, c.has) || strings.Contains(body, "Traceback") {
			t.Errorf("%s: %d %s; want %d with %q", c.name, resp.StatusCode, body, c.want, c.has)
		}
	}
	// The API's token is not for the functions listener, nor its routes.
	resp, _ = httpGet(t, mustRequest(t, "GET", base+"/v1/info", ""))
	if resp.StatusCode != 404 {
		t.Errorf("the API on the functions listener: %d", resp.StatusCode)
	}
	// An async request over the endpoint: 202 and its id, then it runs.
	req = mustRequest(t, "POST", base+"/api/web?name=later", "")
	req.Header.Set("X-Thaw-Key", ep.Key)
	req.Header.Set("X-Thaw-Invocation-Type", "async")
	resp, body = httpGet(t, req)
	var acc client.AsyncAccepted
	if resp.StatusCode != 202 || json.Unmarshal([]byte(body), &acc) != nil || acc.ID == "" {
		t.Fatalf("async endpoint request: %d %s", resp.StatusCode, body)
	}
	waitAsync(t, c, []string{acc.ID}, time.Minute)
	// Everything shows in the history and the metrics.
	recs, err := c.ListInvocations(ctx, "web", 100)
	if err != nil || len(recs) < 5 {
		t.Fatalf("history: %v, %d records", err, len(recs))
	}
	metrics := curl(t, "--unix-socket", d.sock, "http://thawd/metrics")
	for _, want := range []string{`thaw_endpoint_requests_total{endpoint="web",status="200"} 3`, `thaw_endpoint_requests_total{endpoint="web",status="401"} 2`,
		`thaw_endpoint_requests_total{endpoint="-",status="403"} 1`, `thaw_async_outcomes_total{condition="success",function="web"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(d.out.String(), ep.Key) || strings.Contains(d.out.String(), token) {
		t.Error("the daemon logged a key or the token")
	}
}

func mustRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitAsync waits until every id has ended and returns their states.
func waitAsync(t *testing.T, c *client.Client, ids []string, within time.Duration) map[string]*client.AsyncInvocation {
	t.Helper()
	out := map[string]*client.AsyncInvocation{}
	deadline := time.Now().Add(within)
	for len(out) < len(ids) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d asynchronous invocations ended within %s", len(out), len(ids), within)
		}
		for _, id := range ids {
			if out[id] != nil {
				continue
			}
			st, err := c.GetAsync(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if st.State == "succeeded" || st.State == "failed" {
				out[id] = st
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return out
}

// outcomeSink is a webhook that counts the outcomes it receives.
type outcomeSink struct {
	mu  sync.Mutex
	got map[string]int
}

func (s *outcomeSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var o client.Outcome
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil || o.ID == "" {
		w.WriteHeader(400)
		return
	}
	s.mu.Lock()
	s.got[o.ID+"/"+o.Condition]++
	s.mu.Unlock()
}

func TestAsyncSurvivesKill9(t *testing.T) {
	parallel(t)
	dataDir := t.TempDir()
	sink := &outcomeSink{got: map[string]int{}}
	hook := httptest.NewServer(sink)
	defer hook.Close()
	fnAddr := tcptest.FreeAddr(t)
	args := []string{"--async-ack-wait", "3s", "--destination-allow", strings.TrimPrefix(hook.URL, "http://"), "--functions-listen", fnAddr}
	d, c := webDaemon(t, dataDir, "web", args...)
	ctx := ctxT(t)
	// An endpoint and a schedule (of a function of its own) live through the kill too.
	deployWeb(t, c, "beat")
	ep, err := c.CreateEndpoint(ctx, client.CreateEndpointRequest{Function: "web", Auth: "key"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSchedule(ctx, client.CreateScheduleRequest{Name: "beat", Function: "beat", Cron: "@every 1s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetAsyncConfig(ctx, "web", client.AsyncConfigRequest{OnSuccess: hook.URL + "/done"}); err != nil {
		t.Fatal(err)
	}
	// 200 invocations: the first half without an idempotency key, the
	// second with one each.
	ids := enqueueAsync(t, ctx, c)
	// kill -9 once a quarter have run.
	waitInvocationsRan(t, ctx, c, 50)
	d.kill()
	t.Log("killed thawd (SIGKILL)")
	if d, err = startThawd(t, dataDir, args...); err != nil {
		t.Fatal(err)
	}
	c = checkedClient(t, d.sock)
	checkTriggersAfterKill(t, fnAddr, ep.Key, d.sock)
	// The keyed ones again: every one a duplicate of its first.
	for i := 100; i < 200; i++ {
		acc, err := c.InvokeFunctionAsync(ctx, "web", json.RawMessage(`{}`), fmt.Sprintf("order-%d", i))
		if err != nil || !acc.Duplicate || acc.ID != ids[i] {
			t.Fatalf("repeat of key %d: %v %+v (first %s)", i, err, acc, ids[i])
		}
	}
	states := waitAsync(t, c, ids, 5*time.Minute)
	retried := 0
	for _, id := range ids {
		if states[id].State != "succeeded" {
			t.Fatalf("%s: %+v", id, states[id])
		}
		if states[id].Attempts > 1 {
			retried++
		}
	}
	recs, err := c.ListInvocations(ctx, "web", 1000)
	if err != nil {
		t.Fatal(err)
	}
	executions := len(recs) - 1 // one record is the endpoint request after the restart
	extra := waitOutcomes(t, sink, ids)
	t.Logf("200 of 200 completed after kill -9; recorded executions %d (%d beyond one each: at-least-once rate %.1f%%), %d invocations attempted more than once, %d repeated webhook deliveries; 100 repeated idempotency keys queued nothing",
		executions, executions-200, 100*float64(executions-200)/200, retried, extra)
	if executions < 200 {
		t.Errorf("%d executions recorded for 200 completed invocations", executions)
	}
}

// enqueueAsync enqueues 200 asynchronous invocations of web, the second
// half with an idempotency key each, and returns their ids.
func enqueueAsync(t *testing.T, ctx context.Context, c *client.Client) []string {
	t.Helper()
	var ids []string
	for i := range 200 {
		key := ""
		if i >= 100 {
			key = fmt.Sprintf("order-%d", i)
		}
		acc, err := c.InvokeFunctionAsync(ctx, "web", json.RawMessage(fmt.Sprintf(`{"n": %d}`, i)), key)
		if err != nil || acc.Duplicate {
			t.Fatalf("enqueue %d: %v %+v", i, err, acc)
		}
		ids = append(ids, acc.ID)
	}
	return ids
}

// waitInvocationsRan waits up to 3 minutes for n invocations of web to be
// recorded.
func waitInvocationsRan(t *testing.T, ctx context.Context, c *client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		recs, _ := c.ListInvocations(ctx, "web", 1000)
		if len(recs) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d invocations ran in 3 min", len(recs))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkTriggersAfterKill: the endpoint answers, and the schedule fires,
// on the restarted daemon.
func checkTriggersAfterKill(t *testing.T, fnAddr, key, sock string) {
	t.Helper()
	req := mustRequest(t, "GET", "http://"+fnAddr+"/web?name=again", "")
	req.Header.Set("X-Thaw-Key", key)
	if resp, body := httpGet(t, req); resp.StatusCode != 200 || body != "hi again (GET 0)" {
		t.Fatalf("the endpoint after the kill: %d %q", resp.StatusCode, body)
	}
	waitFor(t, time.Minute, "the schedule firing after the kill", func() bool {
		fired := 0
		_, _ = fmt.Sscanf(afterLine(curl(t, "--unix-socket", sock, "http://thawd/metrics"), `thaw_schedule_firings_total{result="fired",schedule="beat"} `), "%d", &fired)
		return fired >= 3
	})
}

// waitOutcomes waits up to a minute for every id's success outcome at
// sink, and returns how many deliveries were repeats.
func waitOutcomes(t *testing.T, sink *outcomeSink, ids []string) int {
	t.Helper()
	waitFor(t, time.Minute, "every outcome at the webhook", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, id := range ids {
			if sink.got[id+"/success"] == 0 {
				return false
			}
		}
		return true
	})
	sink.mu.Lock()
	extra := 0
	for _, n := range sink.got {
		extra += n - 1
	}
	sink.mu.Unlock()
	return extra
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, d, what, cond)
}

func TestAsyncRetriesIntoDeadLetters(t *testing.T) {
	parallel(t)
	d, c := webDaemon(t, t.TempDir(), "flaky")
	ctx := ctxT(t)
	two := 2
	if _, err := c.SetAsyncConfig(ctx, "flaky", client.AsyncConfigRequest{MaxRetries: &two, BackoffMS: 1000}); err != nil {
		t.Fatal(err)
	}
	acc, err := c.InvokeFunctionAsync(ctx, "flaky", json.RawMessage(`{"fail": true}`), "")
	if err != nil {
		t.Fatal(err)
	}
	st := waitAsync(t, c, []string{acc.ID}, 3*time.Minute)[acc.ID]
	if st.State != "failed" || st.Attempts != 3 || len(st.Invocations) != 3 || !strings.Contains(st.Error, "asked to fail") {
		t.Fatalf("state: %+v", st)
	}
	recs, err := c.ListInvocations(ctx, "flaky", 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("history: %v %d", err, len(recs))
	}
	// Newest first: the gaps before retry 1 and 2 grow (1 s then 2 s, each
	// with jitter in its upper half).
	g1, g2 := recs[1].CreatedAt.Sub(recs[2].CreatedAt), recs[0].CreatedAt.Sub(recs[1].CreatedAt)
	if g1 < 500*time.Millisecond || g2 < time.Second {
		t.Errorf("gaps %s, %s: want at least 0.5 s, then 1 s", g1, g2)
	}
	t.Logf("attempts at +0, +%s, +%s", g1.Round(time.Millisecond), (g1 + g2).Round(time.Millisecond))
	dls, err := c.ListDeadLetters(ctx, "flaky", 0)
	if err != nil || len(dls) != 1 || dls[0].Outcome.ID != acc.ID || dls[0].Outcome.Invocation == nil ||
		dls[0].Outcome.Invocation.Error == nil || dls[0].Outcome.Invocation.Error.Type != "RuntimeError" {
		t.Fatalf("dead letters: %v %+v", err, dls)
	}
	// thaw dlq replay runs it again: three more attempts, a new dead letter.
	out, err := exec.Command(repoPath("bin/thaw"), "--url", "unix:"+d.sock, "dlq", "replay", acc.ID).CombinedOutput()
	if err != nil {
		t.Fatalf("thaw dlq replay: %v: %s", err, out)
	}
	again := strings.TrimSpace(string(out))
	if st := waitAsync(t, c, []string{again}, 3*time.Minute)[again]; st.State != "failed" || st.Attempts != 3 {
		t.Fatalf("replayed: %+v", st)
	}
	if recs, _ := c.ListInvocations(ctx, "flaky", 10); len(recs) != 6 {
		t.Fatalf("%d attempts after the replay, want 6", len(recs))
	}
	if dls, _ := c.ListDeadLetters(ctx, "flaky", 0); len(dls) != 1 || dls[0].Outcome.ID != again {
		t.Fatalf("dead letters after the replay: %+v", dls)
	}
}

func TestScheduleFiresEverySecond(t *testing.T) {
	parallel(t)
	d, c := webDaemon(t, t.TempDir(), "tick")
	ctx := ctxT(t)
	for _, bad := range []client.CreateScheduleRequest{{Name: "bad", Function: "tick", Cron: "* * *"},
		{Name: "bad", Function: "tick", Cron: "* * * * *", TimeZone: "Nowhere/Atlantis"}} {
		if _, err := c.CreateSchedule(ctx, bad); err == nil || !strings.Contains(err.Error(), "cron") && !strings.Contains(err.Error(), "time zone") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 100*time.Millisecond)))
	if _, err := c.CreateSchedule(ctx, client.CreateScheduleRequest{Name: "every-second", Function: "tick", Cron: "* * * * * *"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Second)
	if _, err := c.PauseSchedule(ctx, "every-second", true); err != nil {
		t.Fatal(err)
	}
	var n int
	waitFor(t, time.Minute, "the firings' invocations", func() bool {
		m := curl(t, "--unix-socket", d.sock, "http://thawd/metrics")
		fired := 0
		_, _ = fmt.Sscanf(afterLine(m, `thaw_schedule_firings_total{result="fired",schedule="every-second"} `), "%d", &fired)
		recs, _ := c.ListInvocations(ctx, "tick", 1000)
		n = fired
		return fired > 0 && len(recs) >= fired
	})
	t.Logf("a 1-second schedule fired %d times in 30 s", n)
	if n < 29 || n > 31 {
		t.Fatalf("fired %d times in 30 s, want 30 ± 1", n)
	}
}

// afterLine is what follows prefix on its line in text.
func afterLine(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return v
		}
	}
	return ""
}
