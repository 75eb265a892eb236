package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// logsScript runs the real guest agent's request loop on descriptor 3,
// so that its stdout and stderr are free for the handler to write to, as
// in a guest; the handler prints what its event asks.
const logsScript = `
import json, os, subprocess, sys, types
sys.path.insert(0, sys.argv[1])
import thaw_agent
ch = os.fdopen(3, "r+b", buffering=0)
class Chan:
    read_at = 0.0
    def lines(self):
        for l in ch:
            yield l.rstrip(b"\n")
    def send_line(self, text, wait=True):
        ch.write((text + "\n").encode()); return True
    def send(self, obj, wait=True):
        return self.send_line(json.dumps(obj, separators=(",", ":")), wait)
    def send_chunks(self, chunks):
        for c in chunks:
            ch.write(c)
        return True
def handle(event):
    print("to stdout:", event["say"])
    print("to stderr", file=sys.stderr)
    subprocess.run(["sh", "-c", "echo from a subprocess"], check=True)
    os.write(1, b"x" * event.get("pad", 0))
    return event["say"]
fn = thaw_agent.Function("probe")
fn.attach(types.SimpleNamespace(handle=handle), handle)
cap = thaw_agent.OutputCapture()
cap.attach()
thaw_agent.Agent(fn, Chan(), cap).serve()
`

// logsAgent starts the guest agent with logsScript and connects to it.
func logsAgent(t *testing.T) *Conn {
	t.Helper()
	var stderr strings.Builder // until the agent attaches its capture
	cmd := exec.Command(python3(t), "-u", "-c", logsScript, "../../guest/agent")
	cmd.Stderr = &stderr
	c := startAgent(t, cmd, func(guest *os.File) { cmd.ExtraFiles = []*os.File{guest} })
	t.Cleanup(func() {
		c.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("agent: %v\n%s", err, stderr.String())
		}
	})
	return c
}

// TestInvokeLogsWithTheGuestAgent: what the handler, and a process it
// started, wrote to stdout and stderr comes back with the reply, in order;
// SetMaxLogs bounds it, the guest cuts it in the middle and says so.
func TestInvokeLogsWithTheGuestAgent(t *testing.T) {
	c := logsAgent(t)
	r, err := c.Invoke(testCtx(t), "probe", json.RawMessage(`{"say":"caf\u00e9"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "to stdout: caf\u00e9\nto stderr\nfrom a subprocess\n"
	if !r.OK || string(r.Result) != `"caf\u00e9"` || r.Logs == nil || r.Logs.Output != want || r.Logs.Bytes != int64(len(want)) || r.Logs.Cut != 0 {
		t.Fatalf("reply %+v, logs %+v", r, r.Logs)
	}

	c.SetMaxLogs(4096)
	r, err = c.Invoke(testCtx(t), "probe", json.RawMessage(`{"say":"again","pad":100000}`))
	if err != nil {
		t.Fatal(err)
	}
	l := r.Logs
	if l == nil || l.Bytes != int64(len("to stdout: again\nto stderr\nfrom a subprocess\n")+100000) || l.Cut <= 0 ||
		len(l.Output) > 4096+64 || !strings.HasPrefix(l.Output, "to stdout: again\n") ||
		!strings.Contains(l.Output, fmt.Sprintf("[thaw: %d bytes of output cut here]\n", l.Cut)) {
		t.Fatalf("bounded logs %+v", l)
	}
	if int64(len(l.Output))-int64(len(fmt.Sprintf("[thaw: %d bytes of output cut here]\n", l.Cut)))+l.Cut != l.Bytes {
		t.Errorf("kept %d + cut %d is not the %d bytes written", len(l.Output), l.Cut, l.Bytes)
	}
}

// TestInvokeOlderAgentSendsNoLogs: an agent before protocol 5 answers
// without logs, and the reply says so with nil.
func TestInvokeOlderAgentSendsNoLogs(t *testing.T) {
	path := startGuest(t, func(g *guest) {
		r, _ := g.next()
		g.send(reply(r.ID, `{"ok":true,"duration_ms":1.5,"result":{"a":1}}`))
	})
	r, err := dial(t, path).Invoke(testCtx(t), "hello", nil)
	if err != nil || !r.OK || r.Logs != nil || string(r.Result) != `{"a":1}` {
		t.Fatalf("reply %+v, %v", r, err)
	}
}

// TestInvokeLogsBoundedByTheHost: the host asks for max_logs; a guest
// that sends more than it could have is cut; the reply bound leaves room
// for as much as was asked even if every byte of it was escaped.
func TestInvokeLogsBoundedByTheHost(t *testing.T) {
	const maxLogs = 4096
	asked := make(chan float64, 3)
	escaped := strings.Repeat(`\u0001`, maxLogs) // 6 bytes of JSON each
	path := startGuest(t, func(g *guest) {
		for _, logs := range []string{
			`{"output":"` + escaped + `","bytes":4096}`,
			`{"output":"` + strings.Repeat("é", 3*maxLogs) + `","bytes":-5,"cut":-1,"kernel":"` + strings.Repeat("k", 70000) + `"}`,
		} {
			line, err := g.rd.ReadBytes('\n')
			if err != nil {
				return
			}
			var req struct {
				ID      string  `json:"id"`
				MaxLogs float64 `json:"max_logs"`
			}
			_ = json.Unmarshal(line, &req)
			asked <- req.MaxLogs
			g.send(reply(req.ID, `{"ok":true,"duration_ms":1,"logs":`+logs+`,"result":null}`))
		}
	})
	c := dial(t, path)
	c.SetMaxLogs(maxLogs)
	r, err := c.Invoke(testCtx(t), "hello", nil)
	if err != nil || r.Logs == nil || r.Logs.Output != strings.Repeat("\x01", maxLogs) || r.Logs.Cut != 0 {
		t.Fatalf("escaped logs: %v %+v", err, r)
	}
	if got := <-asked; got != maxLogs {
		t.Errorf("max_logs %v, want %d", got, maxLogs)
	}
	r, err = c.Invoke(testCtx(t), "hello", nil)
	if err != nil || r.Logs == nil {
		t.Fatalf("%v %+v", err, r)
	}
	l := r.Logs
	if len(l.Output) > 4*maxLogs+256+100 || !strings.HasSuffix(l.Output, "the rest was cut]\n") || l.Cut != int64(len(strings.Repeat("é", 3*maxLogs)))-(4*maxLogs+256) ||
		l.Bytes != 0 || len(l.Kernel) > maxKernelLog+64 || !strings.HasSuffix(l.Kernel, "[thaw: kernel messages cut]\n") {
		t.Errorf("over-long logs kept %d bytes (cut %d, bytes %d), kernel %d bytes", len(l.Output), l.Cut, l.Bytes, len(l.Kernel))
	}
	if !strings.HasPrefix(l.Output, "éé") || strings.ContainsRune(l.Output, '\uFFFD') {
		t.Errorf("cut in the middle of a character: %q", l.Output[len(l.Output)-80:])
	}
}
