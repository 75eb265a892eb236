package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// logsOf is what e2e/testdata/logs writes for tag, in the order written:
// print() to stdout and to stderr, os.write to descriptor 1, a
// subprocess's stdout and stderr, a last print.
func logsOf(tag string) []string {
	return []string{"print to stdout " + tag, "print to stderr " + tag, "fd 1 directly " + tag,
		"subprocess stdout " + tag, "subprocess stderr " + tag, "last line " + tag}
}

// Function logs on real VMs through bin/thaw: what a handler, a process it
// starts and the guest kernel write is on stderr with thaw invoke --logs
// and in thaw logs after the VM is gone, in the order written, each line
// naming its invocation; an invocation's output over thawd --max-logs
// keeps its first and last parts; a history prune (thawd --history-max,
// at the next start) removes the logs with their records.
func TestFunctionLogs(t *testing.T) {
	parallel(t)
	dataDir := t.TempDir()
	e := startEnvWith(t, dataDir, func(c *daemon.Config) { c.KeepAlive, c.MaxLogBytes = -1, 4096 })
	thaw := cli{t, e}
	thaw.id("function", "create", "logs", "--dir", repoPath("e2e/testdata/logs"))
	t.Log("booting (TCG: about 10 s)")
	vm := thaw.id("vm", "boot", "logs")
	thaw.id("snapshot", "create", vm)
	thaw.must(0, "vm", "delete", vm)

	// A cold invocation: its VM is gone once it answered.
	r := thaw.must(0, "invoke", "logs", "--logs", "--event", `{"tag": "A", "kernel": true}`)
	if strings.TrimSpace(r.stdout) != `{"tag":"A"}` && !strings.Contains(r.stdout, `"tag": "A"`) {
		t.Errorf("stdout is not the result alone: %q", r.stdout)
	}
	want := "  | " + strings.Join(logsOf("A"), "\n  | ") + "\n"
	if !strings.Contains(r.stderr, ":\n"+want+"kernel messages:\n") {
		t.Errorf("invoke --logs: stderr lacks the output in the order written:\n%s\nwant:\n%s", r.stderr, want)
	}
	if !strings.Contains(r.stderr, "thaw-e2e kernel message A") {
		t.Errorf("invoke --logs: no kernel message:\n%s", r.stderr)
	}
	served := regexp.MustCompile(` on vm (vm-[0-9a-f]+)\n`).FindStringSubmatch(r.stderr)
	if served == nil {
		t.Fatalf("invoke's stderr does not name its VM:\n%s", r.stderr)
	}
	if live := thaw.id("vm", "list"); strings.Contains(live, served[1]) {
		t.Fatalf("the cold invocation's VM %s is still there: %q", served[1], live)
	}
	first := thaw.id("invocations", "--function", "logs", "--limit", "1")

	var page wire.List[wire.LogLine]
	if err := json.Unmarshal([]byte(thaw.must(0, "-o", "json", "logs", "logs").stdout), &page); err != nil {
		t.Fatal(err)
	}
	var output []string
	for _, l := range page.Items {
		if l.Invocation != first {
			t.Errorf("line %+v is not of invocation %s", l, first)
		}
		if l.Stream == wire.StreamOutput {
			output = append(output, l.Text)
		}
	}
	if strings.Join(output, "\n") != strings.Join(logsOf("A"), "\n") {
		t.Errorf("thaw logs' output lines %q, want %q", output, logsOf("A"))
	}
	if r := thaw.must(0, "logs", "logs"); !strings.Contains(r.stdout, " "+first+" kernel: [") {
		t.Errorf("thaw logs shows no kernel line of %s:\n%s", first, r.stdout)
	}

	wantLongOutputCut(t, thaw)

	// A prune: only the newest record is kept, and its logs.
	e.stop()
	e = startEnvWith(t, dataDir, func(c *daemon.Config) { c.KeepAlive, c.HistoryMax = -1, 1 })
	thaw = cli{t, e}
	if r := thaw.must(1, "logs", "logs", "--invocation", first); !strings.Contains(r.stderr, "not in the history") {
		t.Errorf("the pruned invocation's logs: %s", r.stderr)
	}
	r = thaw.must(0, "logs", "logs", "-q")
	if strings.Contains(r.stdout, " A\n") || !strings.HasSuffix(r.stdout, "last line B\n") {
		t.Errorf("after the prune, thaw logs:\n%s", r.stdout)
	}
}

// wantLongOutputCut: 100 kB written, about 4 KiB kept (thawd --max-logs
// 4096), its first and last lines and a line saying how much was cut.
func wantLongOutputCut(t *testing.T, thaw cli) {
	t.Helper()
	r := thaw.must(0, "-o", "json", "invoke", "logs", "--logs", "--event", `{"tag": "B", "bytes": 100000}`)
	var inv wire.Invocation
	if err := json.Unmarshal([]byte(r.stdout), &inv); err != nil || inv.Logs == nil {
		t.Fatalf("invoke -o json --logs: %v %q", err, r.stdout)
	}
	l := inv.Logs
	if l.OutputBytes < 100000 || l.CutBytes <= 0 || len(l.Output) > 4096+100 || l.OutputBytes-l.CutBytes > 4096 ||
		!strings.HasPrefix(l.Output, "print to stdout B\n") || !strings.HasSuffix(l.Output, "last line B\n") ||
		!strings.Contains(l.Output, fmt.Sprintf("[thaw: %d bytes of output cut here]", l.CutBytes)) {
		t.Errorf("a long output's logs: %d bytes written, %d cut, %d kept:\n%s", l.OutputBytes, l.CutBytes, len(l.Output), l.Output)
	}
	r = thaw.must(0, "logs", "logs", "--invocation", inv.ID, "-q")
	if !strings.Contains(r.stdout, "bytes of output cut here]\n") || !strings.HasSuffix(r.stdout, "last line B\n") {
		t.Errorf("thaw logs --invocation of the long output:\n%s", r.stdout)
	}
}
