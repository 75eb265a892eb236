package inputs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// GuestHost is the host's loopback as seen from a guest (QEMU user
// networking forwards 10.0.2.2 to the host's 127.0.0.1).
const GuestHost = "10.0.2.2"

// Knobs, variables so that tests can change them.
var (
	redisServerPath   = "/usr/bin/redis-server" // Debian's redis-server
	redisStartTimeout = 10 * time.Second        // until PING answers
	redisStopTimeout  = 5 * time.Second         // SIGTERM to SIGKILL
	redisPortAttempts = 5                       // ports tried when one turns out taken
	pickPort          = freePort
)

// Redis is a redis-server process of ours on 127.0.0.1, and a client of it.
type Redis struct {
	port   int
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has been waited for
	werr   error         // cmd.Wait's result, valid after done
	log    *tailBuffer
	client *redis.Client

	stopOnce sync.Once
	stopErr  error
}

// StartRedis starts redis-server on 127.0.0.1 at a free port, with no
// persistence (--save "" --appendonly no) and dir as its working directory
// (created if needed), and waits until it answers PING. ctx bounds the
// start-up only: the server runs until Stop. If the port turns out to be
// taken by the time redis-server binds it, another one is tried.
//
// The process is in its own process group and gets SIGKILL if the thread
// that started it dies, so a crashed harness does not leave it behind; call
// Stop to end it.
func StartRedis(ctx context.Context, dir string) (*Redis, error) {
	if dir == "" {
		return nil, errors.New("inputs: StartRedis: empty dir")
	}
	bin := redisServerPath
	if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("inputs: redis-server not usable at %s (install the redis-server package): %w", bin, err)
	}
	dir, err := filepath.Abs(dir) // redis-server starts in dir, so --dir must not be relative
	if err != nil {
		return nil, fmt.Errorf("inputs: redis dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("inputs: redis dir: %w", err)
	}
	var lastErr error
	for range redisPortAttempts {
		port, err := pickPort()
		if err != nil {
			return nil, fmt.Errorf("inputs: picking a port for redis-server: %w", err)
		}
		r, err := startRedisAt(ctx, bin, dir, port)
		if err == nil {
			return r, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("inputs: redis-server: no free port after %d attempts: %w", redisPortAttempts, lastErr)
}

var errPortTaken = errors.New("port already in use")

func startRedisAt(ctx context.Context, bin, dir string, port int) (*Redis, error) {
	r := &Redis{port: port, done: make(chan struct{}), log: &tailBuffer{max: 16 << 10}}
	r.cmd = exec.Command(bin,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
	)
	r.cmd.Dir = dir
	r.cmd.Stdout = r.log
	r.cmd.Stderr = r.log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("inputs: starting %s: %w", bin, err)
	}
	go func() {
		r.werr = r.cmd.Wait()
		close(r.done)
	}()
	r.client = redis.NewClient(&redis.Options{
		Addr:                     r.Addr(),
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              time.Second,
		ContextTimeoutEnabled:    true,
		MaxRetries:               -1,
	})

	deadline := time.NewTimer(redisStartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var err error
	for {
		select {
		case <-r.done:
			r.client.Close()
			out := r.log.String()
			if strings.Contains(out, "Address already in use") {
				return nil, fmt.Errorf("inputs: redis-server on port %d: %w", port, errPortTaken)
			}
			return nil, fmt.Errorf("inputs: %s exited before answering PING (%v); its output:\n%s", bin, r.werr, lastLines(out, 20))
		default:
		}
		if err = r.ping(ctx); err == nil {
			return r, nil
		}
		select {
		case <-r.done: // reported at the top of the loop
		case <-ctx.Done():
			r.Stop()
			return nil, fmt.Errorf("inputs: waiting for redis-server on port %d: %w", port, ctx.Err())
		case <-deadline.C:
			r.Stop()
			return nil, fmt.Errorf("inputs: redis-server on port %d did not answer PING within %v (last error: %v); its output:\n%s",
				port, redisStartTimeout, err, lastLines(r.log.String(), 20))
		case <-tick.C:
		}
	}
}

// ping checks that our redis-server answers: PING, then INFO's process_id
// must be our process (not another server that holds the port while ours
// failed to bind it).
func (r *Redis) ping(ctx context.Context) error {
	// Dial first so that the client's pool does not log refused dials.
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", r.Addr())
	if err != nil {
		return err
	}
	conn.Close()
	if err := r.client.Ping(dctx).Err(); err != nil {
		return err
	}
	info, err := r.client.Info(dctx, "server").Result()
	if err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(r.cmd.Process.Pid)
	for _, line := range strings.Split(info, "\n") {
		if strings.TrimSpace(line) == want {
			return nil
		}
	}
	return fmt.Errorf("the server on %s is not process %d", r.Addr(), r.cmd.Process.Pid)
}

// Addr is "127.0.0.1:<port>", the server's address on the host.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Set stores value under key.
func (r *Redis) Set(ctx context.Context, key string, value []byte) error {
	return r.client.Set(ctx, key, value, 0).Err()
}

// Event is the invocation event with which a function in a guest fetches
// key from this server: {"key": key, "redis": {"host": "10.0.2.2", "port":
// port}} (guest/lib/thaw_redis.py's fetch).
func (r *Redis) Event(key string) map[string]any {
	return map[string]any{"key": key, "redis": map[string]any{"host": GuestHost, "port": r.port}}
}

// Stop ends the server: SIGTERM, then SIGKILL if it has not exited within
// redisStopTimeout, and waits for it. It is safe to call more than once; an
// error means the server had already died on its own.
func (r *Redis) Stop() error {
	r.stopOnce.Do(func() { r.stopErr = r.stop() })
	return r.stopErr
}

func (r *Redis) stop() error {
	r.client.Close()
	select {
	case <-r.done:
		return fmt.Errorf("inputs: redis-server had exited on its own (%v); its output:\n%s", r.werr, lastLines(r.log.String(), 20))
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(redisStopTimeout)
	defer t.Stop()
	select {
	case <-r.done:
		return nil
	case <-t.C:
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	return nil
}

// freePort asks the kernel for a free port on 127.0.0.1 and releases it.
// Another process may take it before redis-server binds it; StartRedis then
// tries again.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
