package vmend

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// The consoles and QEMU logs in testdata are real: captured from thaw's VMs
// (the e2e function "hostile": eating memory in the agent or in a child,
// exiting the agent, the agent's own power-off), from QEMU killed by
// signals, and from QEMU refusing to start. Paths are a default install's.
func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// classifyCase is a VM's end and what Classify makes of it.
type classifyCase struct {
	name  string
	f     Facts
	cause Cause
	want  []string // in the message, in this order
	not   []string
}

func TestClassify(t *testing.T) {
	tests := append(append(guestEndCases(t), killedCases(t)...), startCases(t)...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Classify(tt.f)
			msg := e.String()
			t.Log(msg)
			if e.Cause != tt.cause {
				t.Errorf("cause %s, want %s: %s", e.Cause, tt.cause, msg)
			}
			rest := msg
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("message lacks %q (in order):\n%s", w, msg)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tt.not {
				if strings.Contains(msg, n) {
					t.Errorf("message has %q:\n%s", n, msg)
				}
			}
			if !strings.HasPrefix(msg, e.Summary) || strings.ContainsAny(msg, "\n\r\x1b") {
				t.Errorf("message does not lead with the summary, or is not one printable line:\n%q", msg)
			}
		})
	}
}

// cg is a VM cgroup's memory counters: kills by its limit of limitMiB.
func cg(kills int, limitMiB int64) *MemoryCounters {
	return &MemoryCounters{OOMKills: kills, LimitBytes: limitMiB << 20}
}

// guestEndCases are the cases where the guest ended itself: out of memory, its agent gone, a panic, a power-off.
func guestEndCases(t *testing.T) []classifyCase {
	restoreLog := read(t, "restore.qemu")
	return []classifyCase{
		{
			name:  "guest OOM after a restore (the misleading 'status 0: thaw-shim' case)",
			f:     Facts{Started: true, MemoryMiB: 256, Memory: cg(0, 640), Console: read(t, "restore-guest-oom.console"), VMMLog: restoreLog},
			cause: GuestOOM,
			want: []string{"guest ran out of memory (256 MiB): the guest kernel's OOM killer found nothing to kill but the agent (pid 1)",
				"guest console: Kernel panic - not syncing: System is deadlocked on memory", "qemu exited with status 0",
				"qemu log: thaw-shim: MADV_HUGEPAGE"},
		},
		{
			name:  "guest OOM in a booted VM (console with the firmware's escape sequences)",
			f:     Facts{Started: true, MemoryMiB: 256, Console: read(t, "boot-guest-oom.console")},
			cause: GuestOOM,
			want:  []string{"guest ran out of memory (256 MiB)", "System is deadlocked on memory", "qemu exited with status 0"},
			not:   []string{"qemu log:", "\x1b"},
		},
		{
			name:  "guest OOM with the kernel's OOM report on the console",
			f:     Facts{Started: true, MemoryMiB: 512, Console: read(t, "guest-oom-loglevel7.console"), VMMLog: restoreLog},
			cause: GuestOOM,
			want:  []string{"guest ran out of memory (512 MiB)", "Kernel panic - not syncing: System is deadlocked on memory"},
		},
		{
			name:  "the agent exits: the kernel panics",
			f:     Facts{Started: true, MemoryMiB: 256, Console: read(t, "agent-exit.console"), VMMLog: read(t, "restore-short.qemu")},
			cause: GuestPanic,
			want:  []string{"the agent (pid 1) exited with status 3 and the guest kernel panicked", "Attempted to kill init! exitcode=0x00000300"},
			not:   []string{"memory"},
		},
		{
			name:  "the agent dies of a signal",
			f:     Facts{Started: true, Console: "[    7.2] Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b\n"},
			cause: GuestPanic,
			want:  []string{"the agent (pid 1) was killed by SIGSEGV and the guest kernel panicked"},
		},
		{
			name:  "the agent dies after the OOM killer killed other processes",
			f:     Facts{Started: true, MemoryMiB: 256, Console: read(t, "child-oom-killed.console") + "[   20.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100\n"},
			cause: GuestOOM,
			want:  []string{"guest ran out of memory (256 MiB): the guest kernel's OOM killer killed processes, then the agent (pid 1) exited with status 1", "Out of memory: Killed process 116 (python3)"},
		},
		{
			name:  "another guest panic",
			f:     Facts{Started: true, Console: "[    1.5] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\n[    1.6] ---[ end Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0) ]---\n"},
			cause: GuestPanic,
			want:  []string{"the guest kernel panicked: VFS: Unable to mount root fs on unknown-block(0,0); guest console"},
			not:   []string{"]---;"},
		},
		{
			name:  "the agent powers off on a fatal error",
			f:     Facts{Started: true, Console: read(t, "agent-fatal.console"), VMMLog: read(t, "restore-short.qemu")},
			cause: GuestFatal,
			want:  []string{"the guest agent powered the VM off: cannot go on; guest console: thaw-agent: FATAL: cannot go on; powering off", "qemu exited with status 0"},
		},
		{
			name:  "the initramfs gives up",
			f:     Facts{Started: true, Console: "thaw-initramfs: FATAL: cannot mount /dev/vda (ext4, ro) on /newroot\n[    3.1] reboot: Power down\n"},
			cause: GuestFatal,
			want:  []string{"the guest's initramfs powered the VM off: cannot mount /dev/vda (ext4, ro) on /newroot"},
		},
		{
			name:  "a power-off without a reason",
			f:     Facts{Started: true, Console: "[    6.8] reboot: Power down\n"},
			cause: GuestOff,
			want:  []string{"the guest powered off without saying why; guest console: reboot: Power down"},
		},
	}
}

// killedCases are the cases where QEMU was killed or died of a signal: the cgroup's limit, another process, a crash, the sandbox.
func killedCases(t *testing.T) []classifyCase {
	restoreLog := read(t, "restore.qemu")
	return []classifyCase{
		{
			name:  "the cgroup's memory limit kills QEMU",
			f:     Facts{ExitCode: -1, Signal: syscall.SIGKILL, Started: true, MemoryMiB: 256, Memory: cg(1, 640), VMMLog: restoreLog},
			cause: MemoryLimit,
			want: []string{"killed by the VM's memory limit (640 MiB: 256 MiB of guest memory plus 384 MiB for QEMU)",
				"counted 1 OOM kill(s); qemu killed by signal 9 (SIGKILL)", "qemu log: thaw-shim"},
		},
		{
			name:  "a limit squeezed below guest memory",
			f:     Facts{ExitCode: -1, Signal: syscall.SIGKILL, Started: true, MemoryMiB: 256, Memory: cg(1, 200)},
			cause: MemoryLimit,
			want:  []string{"killed by the VM's memory limit (200 MiB); the VM's cgroup counted 1 OOM kill(s); qemu killed"},
		},
		{
			name:  "the limit's kill wins over thaw's own that came late",
			f:     Facts{ExitCode: -1, Signal: syscall.SIGKILL, Started: true, Requested: true, MemoryMiB: 256, Memory: cg(1, 640)},
			cause: MemoryLimit,
			want:  []string{"memory limit"},
		},
		{
			name:  "SIGKILL from elsewhere",
			f:     Facts{ExitCode: -1, Signal: syscall.SIGKILL, Started: true, Memory: cg(0, 640), VMMLog: restoreLog},
			cause: VMMKilled,
			want:  []string{"qemu was killed by SIGKILL, neither by thaw nor by the VM's memory limit"},
		},
		{
			name:  "QEMU segfaults",
			f:     Facts{ExitCode: -1, Signal: syscall.SIGSEGV, Started: true, MemoryMiB: 256, Console: read(t, "restore-guest-oom.console"), VMMLog: restoreLog},
			cause: VMMCrash,
			want:  []string{"qemu crashed (SIGSEGV); qemu killed by signal 11 (SIGSEGV); qemu log: thaw-shim"},
			not:   []string{"guest ran out"},
		},
		{
			name:  "QEMU aborts",
			f:     Facts{ExitCode: -1, Signal: syscall.SIGABRT, Started: true, VMMLog: restoreLog},
			cause: VMMCrash,
			want:  []string{"qemu crashed (SIGABRT)"},
		},
		{
			name:  "the sandbox kills QEMU",
			f:     Facts{ExitCode: -1, Signal: syscall.SIGSYS, Started: true},
			cause: VMMCrash,
			want:  []string{"seccomp sandbox (SIGSYS)"},
		},
		{
			name:  "SIGTERM from another process (QEMU exits with 0)",
			f:     Facts{Started: true, Console: read(t, "child-oom-killed.console"), VMMLog: read(t, "sigterm.qemu")},
			cause: VMMKilled,
			want:  []string{"qemu was stopped by signal 15 (SIGTERM) from pid 15260 (bash), not by thaw", "qemu exited with status 0", "terminating on signal 15"},
		},
	}
}

// startCases are the cases where QEMU did not start or could not load the device state; thaw stopped the VM; timeouts.
func startCases(t *testing.T) []classifyCase {
	return []classifyCase{
		{
			name:  "QEMU refuses to start",
			f:     Facts{ExitCode: 1, VMMLog: "qemu-system-x86_64: can't open backing store /var/lib/thaw/run/vm-1/memory for guest RAM: No such file or directory\n"},
			cause: VMMStart,
			want:  []string{"qemu failed to start: qemu-system-x86_64: can't open backing store", "qemu exited with status 1"},
		},
		{
			name:  "QEMU cannot read the kernel",
			f:     Facts{ExitCode: 1, VMMLog: "thaw-shim: MADV_HUGEPAGE on guest RAM dropped (faults read what readahead allows)\nqemu: could not open kernel file '/proc/self/fd/7': No such file or directory\n"},
			cause: VMMStart,
			want:  []string{"qemu failed to start: qemu: could not open kernel file"},
		},
		{
			name:  "QEMU refuses a descriptor",
			f:     Facts{ExitCode: 1, VMMLog: "qemu-system-x86_64: -netdev tap,id=n,fd=77: n: Can't use file descriptor 77: Bad file descriptor\n"},
			cause: VMMStart,
			want:  []string{"qemu failed to start: qemu-system-x86_64: -netdev tap,id=n,fd=77: n: Can't use file descriptor 77"},
		},
		{
			name:  "QEMU exits at start with an empty log",
			f:     Facts{ExitCode: 1},
			cause: VMMStart,
			want:  []string{"qemu failed to start: no error in its log; qemu exited with status 1"},
		},
		{
			name:  "the device state does not load",
			f:     Facts{ExitCode: 1, Started: true, VMMLog: read(t, "bad-state.qemu")},
			cause: VMMError,
			want:  []string{"qemu failed: qemu-system-x86_64: load of migration failed: Invalid argument", "qemu exited with status 1"},
		},
		{
			name:  "thaw stopped it",
			f:     Facts{ExitCode: -1, Signal: syscall.SIGKILL, Started: true, Requested: true, Memory: cg(0, 640)},
			cause: Stopped,
			want:  []string{"stopped by thaw; qemu killed by signal 9 (SIGKILL)"},
		},
		{
			name:  "a timeout whose guest had run out of memory",
			f:     Facts{Requested: true, Started: true, Stop: "invocation timed out after 30s; guest killed", Console: read(t, "child-oom-killed.console")},
			cause: Stopped,
			want:  []string{"invocation timed out after 30s; guest killed; the guest had run out of memory before; guest console: Out of memory: Killed process 116 (python3)"},
		},
		{
			name:  "a timeout",
			f:     Facts{Requested: true, Started: true, Stop: "boot: guest agent not ready after 1m30s", Console: "Booting from ROM..\r\n"},
			cause: Stopped,
			want:  []string{"boot: guest agent not ready after 1m30s; guest console: Booting from ROM.."},
			not:   []string{"memory"},
		},
	}
}

// The evidence stays bounded whatever the guest printed.
func TestClassifyBoundsEvidence(t *testing.T) {
	long := strings.Repeat("x", 10000)
	e := Classify(Facts{Started: true, Console: "[ 1.0] Kernel panic - not syncing: " + long + "\n", VMMLog: long + "\n" + long})
	if e.Cause != GuestPanic {
		t.Fatalf("cause %s", e.Cause)
	}
	if n := len(e.String()); n > 1500 {
		t.Errorf("message is %d bytes", n)
	}
}

func FuzzClassify(f *testing.F) {
	f.Add(0, 0, true, "[ 1.0] Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b\n", "qemu: x\n")
	f.Add(-1, 9, false, "thaw-agent: FATAL: x; powering off\n", "qemu-system-x86_64: terminating on signal 15\n")
	f.Add(0, 0, true, "[ 2.0] Kernel panic - not syncing: \x1b[31m\u009bred\xff\n", "qemu: \x1b]0;title\a\r\n")
	f.Fuzz(func(t *testing.T, code, sig int, started bool, console, log string) {
		e := Classify(Facts{ExitCode: code, Signal: syscall.Signal(sig & 0x7f), Started: started, Console: console, VMMLog: log,
			Memory: &MemoryCounters{OOMKills: code & 1, LimitBytes: int64(sig) << 20}})
		msg := e.String()
		if e.Cause == "" || e.Summary == "" || !strings.HasPrefix(msg, e.Summary) || len(msg) > maxSummary+maxDetail+8 || !utf8.ValidString(msg) {
			t.Fatalf("%+v", e)
		}
		for _, r := range msg {
			if r < 0x20 || r >= 0x7f && r < 0xa0 {
				t.Fatalf("control character %U in %q", r, msg)
			}
		}
	})
}

// ProcessFacts reads a process's exit code, or the signal that killed it.
func TestProcessFacts(t *testing.T) {
	for _, tc := range []struct {
		script    string
		requested bool
		code      int
		signal    syscall.Signal
	}{
		{"exit 3", false, 3, 0},
		{"kill -9 $$", true, -1, syscall.SIGKILL},
		{"kill -TERM $$", false, -1, syscall.SIGTERM},
	} {
		cmd := exec.Command("sh", "-c", tc.script)
		_ = cmd.Run()
		f := ProcessFacts(cmd.ProcessState, tc.requested)
		if f.ExitCode != tc.code || f.Signal != tc.signal || !f.Started || f.Requested != tc.requested {
			t.Errorf("%s: facts %+v, want code %d signal %v requested %v", tc.script, f, tc.code, tc.signal, tc.requested)
		}
	}
}
