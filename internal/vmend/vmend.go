// Package vmend says why a VM ended. It reads what is left once the VMM
// has exited (its exit status, the end of the guest's console and of the
// VMM's own log, the VM cgroup's memory counters, whether thaw stopped it)
// and names the cause first, keeping the raw evidence as detail. It is
// pure: the callers gather the facts.
package vmend

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// Cause is the kind of end, one word for logs and tests.
type Cause string

// The causes, roughly from the host's side to the guest's.
const (
	// Stopped: thaw stopped the VM (deleted, timed out, daemon stopping).
	Stopped Cause = "stopped"
	// MemoryLimit: the VM cgroup's memory limit killed the VMM.
	MemoryLimit Cause = "memory-limit"
	// VMMCrash: the VMM died of a fault signal (SIGSEGV, SIGABRT, SIGSYS, ...).
	VMMCrash Cause = "vmm-crash"
	// VMMKilled: a signal thaw did not send ended the VMM.
	VMMKilled Cause = "vmm-killed"
	// VMMStart: the VMM exited before its start-up was over.
	VMMStart Cause = "vmm-start"
	// VMMError: the VMM exited with an error status.
	VMMError Cause = "vmm-error"
	// GuestOOM: the guest ran out of its own memory and its kernel panicked.
	GuestOOM Cause = "guest-oom"
	// GuestPanic: any other guest kernel panic (the agent, PID 1, exiting is one).
	GuestPanic Cause = "guest-panic"
	// GuestFatal: the guest agent or initramfs powered the VM off on an error.
	GuestFatal Cause = "guest-fatal"
	// GuestOff: the guest powered off or reset without saying why.
	GuestOff Cause = "guest-off"
)

// MemoryCounters are a VM cgroup's memory counters, read after its VMM exited.
type MemoryCounters struct {
	OOMKills   int   // processes the limit killed (v1 memory.oom_control, v2 memory.events oom_kill)
	LimitBytes int64 // the limit (0: unknown)
}

// Facts are what is known once a VMM has exited.
type Facts struct {
	ExitCode  int            // the exit status; -1 when a signal ended the process
	Signal    syscall.Signal // the signal that ended it, 0 if none
	Started   bool           // its start-up was over (it answered on its control socket)
	Requested bool           // thaw stopped it
	// Stop is thaw's own reason when it stopped the VM ("invocation timed
	// out after 30s; guest killed"); empty: "stopped by thaw".
	Stop      string
	MemoryMiB int             // guest memory
	Memory    *MemoryCounters // the VM cgroup's; nil without one
	Console   string          // the end of the guest console
	VMMLog    string          // the end of the VMM's own log
}

// End is why a VM ended.
type End struct {
	Cause   Cause
	Summary string // the cause in words: what every message leads with
	Detail  string // the evidence: a console line, the exit status, the VMM log's end
}

// String is the summary followed by the evidence.
func (e End) String() string {
	if e.Detail == "" {
		return e.Summary
	}
	return e.Summary + "; " + e.Detail
}

// vmmLogDetail is how much of the VMM log's end the detail keeps.
const vmmLogDetail = 400

// Classify names the cause of a VM's end from f.
func Classify(f Facts) End {
	g := readConsole(f.Console)
	e := classify(f, g)
	var d []string
	if e.Detail != "" {
		d = append(d, e.Detail)
	}
	d = append(d, "qemu "+status(f))
	if tail := oneLine(lastBytes(f.VMMLog, vmmLogDetail)); tail != "" {
		d = append(d, "qemu log: "+tail)
	}
	// Guest and QEMU text in one printable line of bounded length: the
	// reason is stored, logged and shown.
	e.Summary, e.Detail = clip(printable(e.Summary), maxSummary), clip(printable(strings.Join(d, "; ")), maxDetail)
	return e
}

// Bounds of a reason's parts, in bytes.
const (
	maxSummary = 600
	maxDetail  = 1200
)

func classify(f Facts, g guest) End {
	if f.Memory != nil && f.Memory.OOMKills > 0 && f.Signal == syscall.SIGKILL {
		return memoryLimit(f)
	}
	if f.Requested {
		return stopped(f, g)
	}
	if f.Signal != 0 {
		return signalled(f)
	}
	if m := terminatingRE.FindStringSubmatch(f.VMMLog); m != nil {
		n, _ := strconv.Atoi(m[1])
		from := "another process"
		if m[2] != "" {
			from = "pid " + m[2]
		}
		return End{Cause: VMMKilled, Summary: fmt.Sprintf("qemu was stopped by signal %d (%s) from %s, not by thaw", n, sigName(syscall.Signal(n)), from)}
	}
	if !f.Started {
		return End{Cause: VMMStart, Summary: "qemu failed to start: " + vmmError(f.VMMLog, "no error in its log")}
	}
	if f.ExitCode != 0 {
		return End{Cause: VMMError, Summary: "qemu failed: " + vmmError(f.VMMLog, "no error in its log")}
	}
	return guestEnd(f, g)
}

func memoryLimit(f Facts) End {
	m := f.Memory
	limit := fmt.Sprintf("%d MiB", m.LimitBytes>>20)
	if over := m.LimitBytes>>20 - int64(f.MemoryMiB); m.LimitBytes > 0 && over > 0 {
		limit = fmt.Sprintf("%d MiB: %d MiB of guest memory plus %d MiB for QEMU", m.LimitBytes>>20, f.MemoryMiB, over)
	}
	if m.LimitBytes <= 0 {
		limit = "size unknown"
	}
	return End{Cause: MemoryLimit, Summary: fmt.Sprintf("killed by the VM's memory limit (%s)", limit),
		Detail: fmt.Sprintf("the VM's cgroup counted %d OOM kill(s)", m.OOMKills)}
}

func stopped(f Facts, g guest) End {
	e := End{Cause: Stopped, Summary: "stopped by thaw"}
	if f.Stop != "" {
		e.Summary = f.Stop
	}
	switch {
	case g.oomKill != "":
		e.Summary += "; the guest had run out of memory before"
		e.Detail = "guest console: " + g.oomKill
	case g.last != "":
		e.Detail = "guest console: " + g.last
	}
	return e
}

func signalled(f Facts) End {
	name := sigName(f.Signal)
	switch f.Signal {
	case syscall.SIGSYS:
		return End{Cause: VMMCrash, Summary: "qemu was killed by its seccomp sandbox (SIGSYS): it made a system call the sandbox denies"}
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT, syscall.SIGTRAP:
		return End{Cause: VMMCrash, Summary: fmt.Sprintf("qemu crashed (%s)", name)}
	case syscall.SIGKILL:
		by := "neither by thaw nor by the VM's memory limit: the host's OOM killer or another process"
		if f.Memory == nil {
			by = "not by thaw: the host's OOM killer or another process"
		}
		return End{Cause: VMMKilled, Summary: "qemu was killed by SIGKILL, " + by}
	}
	return End{Cause: VMMKilled, Summary: fmt.Sprintf("qemu was killed by %s, not by thaw", name)}
}

// guestEnd explains a VMM that exited with status 0 after start-up: the
// guest ended itself (-no-reboot and panic=-1 make every guest power-off,
// reset and kernel panic end QEMU).
func guestEnd(f Facts, g guest) End {
	mem := "its memory"
	if f.MemoryMiB > 0 {
		mem = fmt.Sprintf("%d MiB", f.MemoryMiB)
	}
	switch {
	case g.fatal != "":
		who := "the guest agent"
		if g.fatalBy == "initramfs" {
			who = "the guest's initramfs"
		}
		return End{Cause: GuestFatal, Summary: fmt.Sprintf("%s powered the VM off: %s", who, g.fatal), Detail: "guest console: " + g.fatalLine}
	case g.panic == "":
		// No panic, no fatal error: the guest powered off or reset itself.
		e := End{Cause: GuestOff, Summary: "the guest shut down without saying why"}
		switch {
		case g.powerOff:
			e.Summary = "the guest powered off without saying why"
		case g.restart:
			e.Summary = "the guest rebooted (a VM ends when its guest reboots)"
		}
		if g.last != "" {
			e.Detail = "guest console: " + g.last
		}
		return e
	case deadlockedRE.MatchString(g.panic) || g.noKillable:
		return End{Cause: GuestOOM, Summary: fmt.Sprintf("guest ran out of memory (%s): the guest kernel's OOM killer found nothing to kill but the agent (pid 1), which it never kills, and panicked", mem),
			Detail: "guest console: " + g.panicLine}
	}
	if m := killInitRE.FindStringSubmatch(g.panic); m != nil {
		how := initExit(m[1])
		if g.oomKill != "" {
			return End{Cause: GuestOOM, Summary: fmt.Sprintf("guest ran out of memory (%s): the guest kernel's OOM killer killed processes, then the agent (pid 1) %s and the guest kernel panicked", mem, how),
				Detail: "guest console: " + g.oomKill + " ... " + g.panicLine}
		}
		return End{Cause: GuestPanic, Summary: fmt.Sprintf("the agent (pid 1) %s and the guest kernel panicked", how), Detail: "guest console: " + g.panicLine}
	}
	e := End{Cause: GuestPanic, Summary: "the guest kernel panicked: " + g.panic, Detail: "guest console: " + g.panicLine}
	if g.oomKill != "" {
		e.Summary += " (it had run out of memory before)"
		e.Detail = "guest console: " + g.oomKill + " ... " + g.panicLine
	}
	return e
}

// ProcessFacts are the facts of a started process that ended as ps tells
// (its exit code and the signal that killed it, if one did); requested:
// thaw stopped it.
func ProcessFacts(ps *os.ProcessState, requested bool) Facts {
	f := Facts{ExitCode: ps.ExitCode(), Started: true, Requested: requested}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		f.Signal = ws.Signal()
	}
	return f
}

// initExit reads the exit code the kernel printed for PID 1 (a wait status).
func initExit(hex string) string {
	ws, err := strconv.ParseUint(hex, 16, 32)
	if err != nil {
		return "exited"
	}
	w := syscall.WaitStatus(ws)
	switch {
	case w.Signaled():
		return "was killed by " + sigName(w.Signal())
	case w.Exited():
		return fmt.Sprintf("exited with status %d", w.ExitStatus())
	}
	return "exited"
}

func status(f Facts) string {
	if f.Signal != 0 {
		return fmt.Sprintf("killed by signal %d (%s)", int(f.Signal), sigName(f.Signal))
	}
	return fmt.Sprintf("exited with status %d", f.ExitCode)
}

// sigName is SIGSEGV for signal 11.
func sigName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

var (
	// QEMU's line when SIGTERM, SIGINT or SIGHUP ends it (it exits with 0).
	terminatingRE = regexp.MustCompile(`terminating on signal (\d+)(?: from pid (\d+(?: \([^)]*\))?))?`)
	deadlockedRE  = regexp.MustCompile(`System is deadlocked on memory`)
	killInitRE    = regexp.MustCompile(`Attempted to kill init! exitcode=0x([0-9a-fA-F]+)`)
	// QEMU's error lines: "qemu-system-x86_64: ..." or "qemu: ...".
	vmmErrorRE = regexp.MustCompile(`(?m)^qemu(?:-system-[a-z0-9_]+)?: .*$`)
)

// vmmError is the VMM log's last error line, else its last line, else none.
func vmmError(log, none string) string {
	if all := vmmErrorRE.FindAllString(log, -1); len(all) > 0 {
		return strings.TrimSpace(printable(all[len(all)-1]))
	}
	if l := lastLine(log); l != "" {
		return l
	}
	return none
}
