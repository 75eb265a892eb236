package qemu

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/vmend"
)

// exitTail is how much of the end of the console and of QEMU's log the
// classification reads: a kernel panic with its stack trace, or an OOM
// report, fits.
const exitTail = 16 << 10

// exitFacts gathers what is known once QEMU has exited: how (waitErr from
// Wait), the ends of the console and of its log, and its cgroup's memory
// counters (the cgroup is still there: the daemon removes it after Done).
func (m *Machine) exitFacts(waitErr error, requested, started bool) vmend.Facts {
	f := vmend.Facts{Started: started, MemoryMiB: m.spec.MemoryMiB,
		Console: readTail(filepath.Join(m.spec.RunDir, "console.log"), exitTail),
		VMMLog:  readTail(filepath.Join(m.spec.RunDir, "qemu.log"), exitTail)}
	var ee *exec.ExitError
	switch {
	case errors.As(waitErr, &ee):
		f.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			f.Signal = ws.Signal()
		}
	case waitErr != nil:
		f.ExitCode = -1
		f.VMMLog += "\nwait: " + waitErr.Error()
	}
	// thaw stops QEMU with SIGKILL only: a QEMU that ended otherwise while
	// thaw was about to kill it ended on its own.
	f.Requested = requested && f.Signal == syscall.SIGKILL
	if m.spec.Cgroup != nil {
		f.Memory = memoryCounters(m.spec.Cgroup, f.Signal == syscall.SIGKILL && !requested)
	}
	return f
}

// memoryCounters reads a cgroup's counters; for a VMM killed by SIGKILL
// that thaw did not send, it gives the kernel a moment to count an OOM
// kill it is still finishing.
func memoryCounters(g interface {
	MemoryCounters() (vmend.MemoryCounters, error)
}, waitForKill bool) *vmend.MemoryCounters {
	c, err := g.MemoryCounters()
	for i := 0; waitForKill && err == nil && c.OOMKills == 0 && i < 10; i++ {
		time.Sleep(10 * time.Millisecond)
		c, err = g.MemoryCounters()
	}
	if err != nil {
		return nil
	}
	return &c
}

// readTail returns up to n bytes from the end of a file ("" if unreadable).
func readTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		if _, err := f.Seek(st.Size()-n, io.SeekStart); err != nil {
			return ""
		}
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return string(b)
}
