package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/restore"
)

// runMainEnv makes this test binary run thaw's main instead of the tests:
// tests run it as a real thaw process (signals, a shell's completion).
const runMainEnv = "THAW_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// thawCommand is this binary as the thaw command, with args.
func thawCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

// Ctrl-C (SIGINT) ends a thaw waiting for the daemon with exit code 130,
// SIGTERM with 143, each saying it was interrupted.
func TestSignalExitCodes(t *testing.T) {
	d := newRealDaemon(t, func(c *daemon.Config) { c.InvokeTimeout, c.KeepAlive = 2*time.Second, -1 })
	d.echoFunction(t, "echo")
	d.bootSnapshot(t, "echo")
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		cmd := thawCommand(t, "--url", d.srv.URL, "invoke", "echo", "--event", `{"op": "hang"}`)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Signalled once its invocation runs: a VM restored for it.
		waitFor(t, func() bool {
			vms, _ := d.svc.ListVMs(context.Background())
			return slices.ContainsFunc(vms, func(v *catalog.VM) bool { return v.Snapshot != "" && v.Live() })
		})
		time.Sleep(100 * time.Millisecond)
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != want {
			t.Errorf("%s: exit code %d (%v), want %d; stderr %q", sig, code, err, want, errb.String())
		}
		if out.Len() != 0 || !strings.Contains(errb.String(), "thaw: interrupted") {
			t.Errorf("%s: stdout %q, stderr %q", sig, out.String(), errb.String())
		}
		// The daemon ends the hanging invocation at its timeout.
		waitFor(t, func() bool {
			vms, _ := d.svc.ListVMs(context.Background())
			return !slices.ContainsFunc(vms, func(v *catalog.VM) bool { return v.Snapshot != "" && v.Live() })
		})
	}
}

// 'source <(thaw completion bash)' completes in a plain bash, without the
// bash-completion package: commands, daemon objects, files.
func TestCompletionPlainBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	srv := completionDaemon(t)
	bin := t.TempDir()
	wrapper := "#!/bin/sh\nexec env " + runMainEnv + "=1 '" + os.Args[0] + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "thaw"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	for _, f := range []string{"event.json", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(files, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var kinds []string
	for _, k := range restore.Kinds() {
		kinds = append(kinds, string(k))
	}
	for _, c := range []struct {
		line string
		want []string
	}{
		{"thaw vm ", []string{"boot", "delete", "get", "list", "pause", "restore", "resume"}},
		{"thaw invoke h", []string{"hello"}},
		{"thaw invoke hello --strategy ", kinds},
		{"thaw vm list --state st", []string{"standby", "stopped"}},
		{"thaw invoke hello --event-file " + files + "/", []string{files + "/event.json"}},
	} {
		// compopt works only under a real TAB; called directly, as here, it
		// would complain.
		script := `compopt() { :; }
source <(thaw completion bash)
if declare -F _get_comp_words_by_ref >/dev/null; then echo "bash-completion is loaded" >&2; exit 1; fi
COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
read -r -a COMP_WORDS <<<"$COMP_LINE"
[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
__start_thaw thaw "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script, "bash", c.line)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "THAW_URL="+srv.URL, "BASH_COMPLETION_VERSINFO=")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil || errb.Len() > 0 {
			t.Errorf("%q: %v, stderr %q", c.line, err, errb.String())
			continue
		}
		got := strings.Fields(out.String())
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%q completes to %q, want %q", c.line, got, want)
		}
	}
}
