package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// cli runs bin/thaw against e's daemon (make build builds it).
type cli struct {
	t *testing.T
	e *env
}

type cliResult struct {
	code           int
	stdout, stderr string
}

func (c cli) run(args ...string) cliResult {
	c.t.Helper()
	code, out, errb := thawCLI(c.t, c.e, args...)
	return cliResult{code, out, errb}
}

// must runs args, which must exit with code, and returns stdout trimmed.
func (c cli) must(code int, args ...string) cliResult {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code {
		c.t.Fatalf("thaw %s: exit code %d, want %d: %s", strings.Join(args, " "), r.code, code, r.stderr)
	}
	return r
}

func (c cli) id(args ...string) string {
	c.t.Helper()
	return strings.TrimSpace(c.must(0, append(args, "-q")...).stdout)
}

// The operator's day on real VMs through bin/thaw: a cold invocation's
// stdout is the result as a JSON document (python3 -m json.tool reads
// it) and its VM is kept idle; premap after a newer snapshot appeared
// warns that it fell back, and --strict refuses; a warm invocation that
// times out says which flags set the timeout, kills its VM and is in the
// history; a boot is canceled.
func TestCLIDay(t *testing.T) {
	parallel(t)
	e := startEnv(t, t.TempDir())
	thaw := cli{t, e}
	thaw.id("function", "create", "probe", "--dir", repoPath("e2e/testdata/probe"))
	t.Log("booting (TCG: about 10 s)")
	vm := thaw.id("vm", "boot", "probe")
	snap1 := thaw.id("snapshot", "create", vm)

	r := thaw.must(0, "invoke", "probe", "--event", `{"name": "you"}`)
	out := filepath.Join(t.TempDir(), "out.json")
	if err := os.WriteFile(out, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	tool, err := exec.Command("python3", "-m", "json.tool", out).CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m json.tool out.json: %v\n%s", err, tool)
	}
	var got any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || !reflect.DeepEqual(got, map[string]any{"message": "hello, you!"}) {
		t.Fatalf("stdout %q (%v), want the handler's result alone", r.stdout, err)
	}
	if !strings.Contains(r.stderr, "invocation inv-") || !strings.Contains(r.stderr, "restore setup") {
		t.Errorf("the timing is not on stderr: %s", r.stderr)
	}
	if idle := thaw.id("vm", "list", "--state", "idle"); !strings.HasPrefix(idle, "vm-") || strings.Contains(idle, "\n") {
		t.Errorf("the cold invocation's VM is not listed idle: %q", idle)
	}

	// premap: stored, it restores; a newer snapshot is not stored, and the
	// function's invocation picks it.
	thaw.id("snapshot", "store", snap1)
	if r := thaw.must(0, "invoke", "probe", "--strategy", "premap", "--strict"); strings.Contains(r.stderr, "warning") {
		t.Errorf("premap of a stored snapshot warned: %s", r.stderr)
	}
	snap2 := thaw.id("snapshot", "create", vm)
	r = thaw.must(0, "invoke", "probe", "--strategy", "premap")
	if !strings.HasPrefix(r.stderr, "thaw: warning: strategy premap fell back to vanilla: ") || !strings.Contains(r.stderr, "thaw snapshot store "+snap2) {
		t.Errorf("no warning first on stderr:\n%s", r.stderr)
	}
	r = thaw.must(1, "invoke", "probe", "--strategy", "premap", "--strict")
	if !strings.Contains(r.stderr, "strict: premap cannot restore "+snap2) || r.stdout != "" {
		t.Errorf("--strict: stdout %q, stderr %q", r.stdout, r.stderr)
	}

	// A warm invocation that times out kills its VM and is in the history.
	r = thaw.must(1, "invoke", "probe", "--vm", vm, "--event", `{"op": "sleep", "seconds": 30}`, "--timeout-ms", "1000")
	for _, want := range []string{"timed out after 1s", "thaw invoke --timeout-ms", "thawd --invoke-timeout",
		"the VM was killed (a guest that does not answer cannot be trusted)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("timeout error lacks %q: %s", want, r.stderr)
		}
	}
	if failed := thaw.id("vm", "list", "--state", "failed"); failed != vm {
		t.Errorf("vm list --state failed: %q, want %s", failed, vm)
	}
	lines := strings.Split(strings.TrimSpace(thaw.must(0, "invocations", "--function", "probe", "--limit", "1").stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], " no ") || !strings.Contains(lines[1], "warm") || !strings.Contains(lines[1], "Timeout") {
		t.Errorf("the timed-out invocation is not the history's newest (OK no, warm, ERROR Timeout): %q", lines)
	}

	// A boot canceled while it runs leaves no VM.
	op := strings.TrimSpace(thaw.must(0, "vm", "boot", "probe", "--detach").stdout)
	r = thaw.must(0, "operation", "cancel", op)
	if !strings.Contains(r.stdout, "failed") || !strings.Contains(r.stdout, "499 canceled") {
		t.Errorf("operation cancel: %s", r.stdout)
	}
	for _, state := range []string{"booting", "running"} {
		if ids := thaw.id("vm", "list", "--state", state); ids != "" {
			t.Errorf("after the cancel, %s VMs: %q", state, ids)
		}
	}
}
