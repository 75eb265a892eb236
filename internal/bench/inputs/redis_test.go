package inputs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/thaw-dev/thaw/internal/tcptest"
)

func needRedis(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(redisServerPath); err != nil {
		t.Skipf("no redis-server at %s: %v", redisServerPath, err)
	}
}

// gone reports whether pid no longer exists (it was reaped by Wait).
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

func TestRedisRoundTrip(t *testing.T) {
	needRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "redis")
	r, err := StartRedis(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if r.Port() <= 0 || r.Addr() != net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port())) || r.GuestAddr() != "10.0.2.2:"+strconv.Itoa(r.Port()) {
		t.Errorf("addr %s guest %s port %d", r.Addr(), r.GuestAddr(), r.Port())
	}
	if ev, _ := json.Marshal(r.Event("thaw/json/A/1")); string(ev) != `{"key":"thaw/json/A/1","redis":{"host":"10.0.2.2","port":`+strconv.Itoa(r.Port())+`}}` {
		t.Errorf("event %s", ev)
	}
	if err := r.Client().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	metas, err := Load(ctx, r, []string{"hello", "image", "json", "ffmpeg", "pagerank"}, []string{"A", "B"}, []float64{0.5, 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) != 5*2*2 {
		t.Errorf("%d inputs loaded, want 20", len(metas))
	}
	// defaults: every function, A and B at their Table 2 scales
	all, err := Load(ctx, r, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2*len(Functions()) {
		t.Errorf("%d inputs loaded by default, want %d", len(all), 2*len(Functions()))
	}
	if _, ok := all["thaw/json/B/11.4"]; !ok {
		t.Error("default load lacks json's B at 11.4")
	}
	for k, m := range all {
		metas[k] = m
	}
	for key, m := range metas {
		got, err := r.Get(ctx, key)
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		want, _ := mustGenerate(t, m.Function, m.Variant, m.Scale)
		sum := sha256.Sum256(got)
		if !bytes.Equal(got, want) || hex.EncodeToString(sum[:]) != m.SHA256 || len(got) != m.Bytes {
			t.Errorf("GET %s: %d bytes, not the %d generated", key, len(got), len(want))
		}
	}
	if _, err := r.Get(ctx, "thaw/nope/A/1"); err == nil {
		t.Error("GET of a missing key succeeded")
	}

	pid := r.Pid()
	if gone(pid) {
		t.Fatal("redis-server gone before Stop")
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("redis-server %d still exists after Stop", pid)
	}
	if c, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Stop", r.Addr())
	}
	if err := r.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	// nothing persisted
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("redis wrote %v into its dir", ents)
	}
}

// swap sets *p to v for the rest of the test.
func swap[T any](t *testing.T, p *T, v T) {
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}

func TestStartRedisMissingBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-redis-server")
	swap(t, &redisServerPath, missing)
	r, err := StartRedis(context.Background(), t.TempDir())
	if err == nil {
		r.Stop()
		t.Fatal("StartRedis succeeded without a binary")
	}
	if !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "redis-server") {
		t.Errorf("error %q names neither the binary nor redis-server", err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %q does not wrap ErrNotExist", err)
	}
}

func TestStartRedisEmptyDir(t *testing.T) {
	if _, err := StartRedis(context.Background(), ""); err == nil {
		t.Fatal("StartRedis accepted an empty dir")
	}
}

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-redis-server")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStartRedisExitsEarly(t *testing.T) {
	swap(t, &redisServerPath, script(t, "echo 'FATAL: bad config' >&2; exit 3"))
	_, err := StartRedis(context.Background(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "exited before answering PING") || !strings.Contains(err.Error(), "FATAL: bad config") {
		t.Fatalf("err = %v", err)
	}
}

func TestStartRedisNeverAnswers(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	swap(t, &redisServerPath, script(t, "echo $$ > "+pidFile+"; exec sleep 60"))
	swap(t, &redisStartTimeout, 300*time.Millisecond)
	start := time.Now()
	_, serr := StartRedis(context.Background(), t.TempDir())
	if serr == nil || !strings.Contains(serr.Error(), "did not answer PING") {
		t.Fatalf("err = %v", serr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("the process that never answered (%d) was left running", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestStartRedisCancelled(t *testing.T) {
	swap(t, &redisServerPath, script(t, "exec sleep 60"))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := StartRedis(ctx, t.TempDir())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
}

func TestStartRedisPortTaken(t *testing.T) {
	needRedis(t)
	taken := tcptest.Serve(t, func(c net.Conn, _ int) { c.Close() }).Port // held until the test ends
	calls := 0
	swap(t, &pickPort, func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return freePort()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Chdir(t.TempDir())
	r, err := StartRedis(ctx, "relative/redis") // a relative dir works too
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if r.Port() == taken || calls != 2 {
		t.Errorf("port %d (taken %d), %d ports picked", r.Port(), taken, calls)
	}
	if err := r.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A server of someone else's on the picked port answers PING; StartRedis
// must notice that it is not its own process and try another port.
func TestStartRedisPortHeldByRedis(t *testing.T) {
	needRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other, err := StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	calls := 0
	swap(t, &pickPort, func() (int, error) {
		calls++
		if calls == 1 {
			return other.Port(), nil
		}
		return freePort()
	})
	r, err := StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if r.Port() == other.Port() || r.Pid() == other.Pid() || calls != 2 {
		t.Errorf("port %d pid %d; the other server's %d %d; %d ports picked", r.Port(), r.Pid(), other.Port(), other.Pid(), calls)
	}
}

// GuestAddr is "10.0.2.2:<port>", the server's address from inside a guest.
func (r *Redis) GuestAddr() string { return net.JoinHostPort(GuestHost, strconv.Itoa(r.port)) }

// Port is the TCP port the server listens on.
func (r *Redis) Port() int { return r.port }

// Pid is the redis-server process's id.
func (r *Redis) Pid() int { return r.cmd.Process.Pid }

// Client is a go-redis client of the server (closed by Stop).
func (r *Redis) Client() *redis.Client { return r.client }

// Get returns the value stored under key (an error wrapping redis.Nil if
// there is none).
func (r *Redis) Get(ctx context.Context, key string) ([]byte, error) {
	return r.client.Get(ctx, key).Bytes()
}
