package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRestorePlainLine checks the restore request's plain line: its id,
// the host's time as it was written, and the entropy in hex.
func TestRestorePlainLine(t *testing.T) {
	entropy := bytes.Repeat([]byte{0xab, 0x01}, 32)
	path, lines := restoreGuest(t, `{"ok":true,"clock_step_ms":2.5,"reseeded":["kernel","random"],"hook":{"ran":false},"steps":{"total":1.25}}`)
	before := time.Now().UnixNano()
	r, err := dial(t, path).Restore(testCtx(t), entropy)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixNano()
	l := <-lines
	f := strings.Fields(l)
	if len(f) != 4 || f[0] != "restore" || f[1] != "1" || !strings.HasSuffix(l, "\n") || strings.Count(l, " ") != 3 {
		t.Fatalf("restore line %q", l)
	}
	if ns, err := strconv.ParseInt(f[2], 10, 64); err != nil || ns < before || ns > after {
		t.Errorf("time %s not between %d and %d (%v)", f[2], before, after, err)
	}
	if f[3] != hex.EncodeToString(entropy) {
		t.Errorf("entropy %s", f[3])
	}
	if r.ClockStepMS != 2.5 || r.Hook == nil || r.Hook.Ran || r.Steps["total"] != 1.25 || len(r.Reseeded) != 2 {
		t.Errorf("reply %+v", r)
	}
}

// TestRestoreFallsBackToJSON: an agent that takes the plain line for
// malformed JSON (before protocol 2) gets the JSON request next.
func TestRestoreFallsBackToJSON(t *testing.T) {
	entropy := bytes.Repeat([]byte{7}, 64)
	got := make(chan map[string]any, 1)
	path := startGuest(t, func(g *guest) {
		if _, err := g.rd.ReadString('\n'); err != nil {
			return
		}
		g.send(`{"event":"ready","agent":"thaw-agent/1"}`,
			`{"id":null,"ok":false,"duration_ms":0.0,"error":{"type":"BadRequest","message":"malformed JSON: Expecting value"}}`)
		l, err := g.rd.ReadBytes('\n')
		if err != nil {
			return
		}
		var req map[string]any
		if err := json.Unmarshal(l, &req); err != nil {
			t.Errorf("second request is not JSON: %q", l)
			return
		}
		got <- req
		g.send(reply(req["id"].(string), `{"ok":true,"hook":{"ran":false}}`))
	})
	if _, err := dial(t, path).Restore(testCtx(t), entropy); err != nil {
		t.Fatal(err)
	}
	req := <-got
	if req["op"] != "restore" || req["id"] != "2" || req["entropy"] != base64.StdEncoding.EncodeToString(entropy) {
		t.Errorf("JSON restore request %v", req)
	}
	if ns, ok := req["time_ns"].(float64); !ok || ns <= 0 {
		t.Errorf("time_ns %v", req["time_ns"])
	}
}

// TestRestoreRefusedByAgent: a refusal with the request's id is an error,
// not a reason to ask again.
func TestRestoreRefusedByAgent(t *testing.T) {
	path := startGuest(t, func(g *guest) {
		l, err := g.rd.ReadString('\n')
		if err != nil {
			return
		}
		g.send(reply(strings.Fields(l)[1], `{"ok":false,"error":{"type":"BadRequest","message":"restore: entropy must be 32 to 512 bytes, got 4"}}`))
	})
	_, err := dial(t, path).Restore(testCtx(t), []byte{1, 2, 3, 4})
	if err == nil || !strings.Contains(err.Error(), "entropy must be 32") {
		t.Fatalf("err %v", err)
	}
}

// agentScript runs the real guest agent's request loop on stdin/stdout,
// with the clock and the kernel RNG stood in (they are the host's here):
// it prints what they were given on stderr.
const agentScript = `
import json, os, sys, time, types
sys.path.insert(0, sys.argv[1])
import thaw_agent
time.clock_settime_ns = lambda clock, t: print("clock", t, file=sys.stderr, flush=True)
thaw_agent.reseed_kernel = lambda d: print("entropy", d.hex(), file=sys.stderr, flush=True)
class Chan:
    read_at = 0.0
    def lines(self):
        for l in sys.stdin.buffer:
            yield l.rstrip(b"\n")
    def send_line(self, text, wait=True):
        sys.stdout.write(text + "\n"); sys.stdout.flush(); return True
    def send(self, obj, wait=True):
        return self.send_line(json.dumps(obj, separators=(",", ":")), wait)
    def send_chunks(self, chunks):
        sys.stdout.buffer.write(b"".join(chunks)); sys.stdout.flush(); return True
fn = thaw_agent.Function("probe")
def hook():
    print("hook", *[os.environb.get(n.encode(), b"-").hex() for n in sys.argv[2:]], file=sys.stderr, flush=True)
fn.attach(types.SimpleNamespace(on_restore=hook), lambda e: e)
thaw_agent.Agent(fn, Chan()).serve()
`

// TestRestoreWithTheGuestAgent runs Restore against the guest agent's own
// code: the plain line is parsed and answered, the clock gets the host's
// time, the RNG the entropy, the hook runs.
func TestRestoreWithTheGuestAgent(t *testing.T) {
	c, stderr, wait := guestAgent(t)
	entropy := bytes.Repeat([]byte{0x5a, 0xc3}, 32)
	before := time.Now().UnixNano()
	r, err := c.Restore(testCtx(t), entropy)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatalf("ping after restore: %v", err)
	}
	wait()
	if !r.OK || r.Hook == nil || !r.Hook.Ran || len(r.Reseeded) != 2 || r.Steps["total"] <= 0 || r.DurationMS != r.Steps["total"] {
		t.Errorf("reply %+v", r)
	}
	f := strings.Fields(stderr.String())
	if len(f) != 5 || f[0] != "clock" || f[2] != "entropy" || f[3] != hex.EncodeToString(entropy) || f[4] != "hook" {
		t.Fatalf("agent saw %q", stderr.String())
	}
	if ns, _ := strconv.ParseInt(f[1], 10, 64); ns < before || ns > time.Now().UnixNano() {
		t.Errorf("clock set to %s", f[1])
	}
}

// guestAgent starts the guest agent's request loop (agentScript) and
// connects to it; the names in env are printed by its hook (hex of their
// values in its environment). wait closes the connection and waits for
// the agent to end.
func guestAgent(t *testing.T, env ...string) (c *Conn, stderr *bytes.Buffer, wait func()) {
	t.Helper()
	stderr = &bytes.Buffer{}
	cmd := exec.Command(python3(t), append([]string{"-c", agentScript, "../../guest/agent"}, env...)...)
	cmd.Stderr = stderr
	c = startAgent(t, cmd, func(guest *os.File) { cmd.Stdin, cmd.Stdout = guest, guest })
	return c, stderr, func() {
		c.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("agent: %v\n%s", err, stderr.String())
		}
	}
}

// startAgent starts cmd, a guest agent, with the guest end of a socket
// pair handed to it by attach, and connects to the host end.
func startAgent(t *testing.T, cmd *exec.Cmd, attach func(guest *os.File)) *Conn {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	attach(theirs)
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		mine.Close()
		t.Fatal(err)
	}
	nc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	return NewConn(nc)
}

// TestRestoreSecretsWithTheGuestAgent: the secrets a restore sends are in
// the guest's environment when its on_restore hook runs, byte for byte.
func TestRestoreSecretsWithTheGuestAgent(t *testing.T) {
	c, stderr, wait := guestAgent(t, "DB_PASSWORD", "API_TOKEN", "UNSET_ONE")
	secrets := []EnvVar{{"DB_PASSWORD", []byte("p4ss=word with spaces\nand a newline")}, {"API_TOKEN", []byte("tok-caf\u00e9-0123")}}
	r, err := c.RestoreWithSecrets(testCtx(t), bytes.Repeat([]byte{1}, 32), secrets)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	wait()
	if r.Secrets != 2 {
		t.Errorf("reply says %d secrets set", r.Secrets)
	}
	f := strings.Fields(stderr.String())
	want := []string{"hook", hex.EncodeToString(secrets[0].Value), hex.EncodeToString(secrets[1].Value), hex.EncodeToString([]byte("-"))}
	if len(f) < 4 || strings.Join(f[len(f)-4:], " ") != strings.Join(want, " ") {
		t.Fatalf("hook saw %q, want %q", stderr.String(), want)
	}
}

// TestRestoreSecretsRefusedByOldAgents: an agent before protocol 4 refuses
// the line with secrets (protocol 2) or answers without having set them;
// either is ErrNoSecrets, and the request is not sent again without them.
func TestRestoreSecretsRefusedByOldAgents(t *testing.T) {
	for name, answer := range map[string]func(g *guest, id string){
		"protocol 2": func(g *guest, id string) {
			g.send(`{"id":null,"ok":false,"duration_ms":0.0,"error":{"type":"BadRequest","message":"restore: want 'restore <id> <time_ns> <hex entropy>'"}}`)
		},
		"set none": func(g *guest, id string) { g.send(reply(id, `{"ok":true,"hook":{"ran":false}}`)) },
	} {
		t.Run(name, func(t *testing.T) {
			lines := make(chan int, 1)
			path := startGuest(t, func(g *guest) {
				l, err := g.rd.ReadString('\n')
				if err != nil {
					return
				}
				f := strings.Fields(l)
				if len(f) != 5 {
					t.Errorf("restore line with secrets has %d fields", len(f))
				}
				answer(g, f[1])
				n := 0
				_ = g.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				for {
					if _, err := g.rd.ReadString('\n'); err != nil {
						break
					}
					n++
				}
				lines <- n
			})
			_, err := dial(t, path).RestoreWithSecrets(testCtx(t), bytes.Repeat([]byte{1}, 32), []EnvVar{{"A", []byte("value-1234")}})
			if !errors.Is(err, ErrNoSecrets) {
				t.Fatalf("err %v, want ErrNoSecrets", err)
			}
			if n := <-lines; n != 0 {
				t.Errorf("%d more requests after the refusal", n)
			}
		})
	}
}
