package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// procStatus returns the named fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out
}

// memoryCgroup is the v1 memory cgroup directory of pid.
func memoryCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (strings.Contains(","+parts[1]+",", ",memory,") || parts[1] == "") {
			if parts[1] == "" {
				return filepath.Join("/sys/fs/cgroup", parts[2])
			}
			return filepath.Join("/sys/fs/cgroup/memory", parts[2])
		}
	}
	t.Fatalf("no memory cgroup for pid %d:\n%s", pid, b)
	return ""
}

// asUser runs a command as uid (what a guest that took over QEMU could do).
func asUser(uid uint32, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	return cmd.CombinedOutput()
}

// hostileEnv starts a daemon in dataDir (edit, if not nil, changes its
// config first) and boots and snapshots the hostile function in it.
func hostileEnv(t *testing.T, dataDir string, edit func(*daemon.Config)) (*env, *client.VM, *client.Snapshot) {
	t.Helper()
	e := startEnvWith(t, dataDir, edit)
	boot, snap := bootSnapshot(t, e.c, "hostile", "e2e/testdata/hostile")
	return e, boot, snap
}

// TestQEMUConfinement checks what a guest that escaped into QEMU would
// find: an unprivileged user of its own, no capabilities, a seccomp
// sandbox, no path to thaw's files, no daemon secrets in its environment,
// its own cgroup with a memory limit the kernel enforces, and a console log
// that cannot fill the disk.
func TestQEMUConfinement(t *testing.T) {
	t.Setenv("THAW_TOKEN", "daemon-secret-must-not-reach-qemu")
	dataDir := t.TempDir()
	ctx := ctxT(t)
	e, boot, snap := hostileEnv(t, dataDir, func(c *daemon.Config) { c.ConsoleLogLimit = 64 << 10 })
	c := e.c
	clone := restoreVM(t, c, snap.ID, "vanilla")
	uids := map[string]string{}
	for _, vm := range []*client.VM{boot, clone} {
		checkConfinedVM(t, vm, uids)
	}

	t.Run("the VMM user reaches none of thaw's files", func(t *testing.T) {
		uid, _ := strconv.Atoi(strings.Fields(procStatus(t, clone.PID)["Uid"])[0])
		for _, p := range []string{filepath.Join(snap.Dir, "memory"), filepath.Join(snap.Dir, "vmstate"),
			filepath.Join(dataDir, "catalog.db"), clone.RunDir} {
			out, err := asUser(uint32(uid), "cat", p)
			if err == nil || !strings.Contains(string(out), "Permission denied") {
				t.Errorf("uid %d read %s: %v %q", uid, p, err, out)
			}
		}
		out, err := asUser(uint32(uid), "sh", "-c", "echo x >> "+filepath.Join(snap.Dir, "memory"))
		if err == nil {
			t.Errorf("uid %d wrote the snapshot's memory: %q", uid, out)
		}
	})

	t.Run("a console flood is capped", func(t *testing.T) {
		inv, err := c.InvokeVM(ctx, clone.ID, ev(`{"op":"console","kib":512}`), client.InvokeOptions{})
		if err != nil || !inv.OK {
			t.Fatalf("flood: %v %+v", err, inv)
		}
		st, err := os.Stat(filepath.Join(clone.RunDir, "console.log"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 64<<10 {
			t.Errorf("console.log is %d bytes, over the 64 KiB limit", st.Size())
		}
		if inv, err := c.InvokeVM(ctx, clone.ID, ev(`{}`), client.InvokeOptions{}); err != nil || !inv.OK {
			t.Errorf("vm unusable after the flood: %v %+v", err, inv)
		}
	})

	t.Run("the kernel enforces the memory limit", func(t *testing.T) {
		cg := memoryCgroup(t, clone.PID)
		usage, _ := os.ReadFile(filepath.Join(cg, "memory.usage_in_bytes"))
		u, _ := strconv.ParseInt(strings.TrimSpace(string(usage)), 10, 64)
		// Squeeze the limit to what the VM uses now plus 32 MiB, then let the guest eat 160 MiB.
		for _, f := range []string{"memory.memsw.limit_in_bytes", "memory.limit_in_bytes"} {
			_ = os.WriteFile(filepath.Join(cg, f), []byte(strconv.FormatInt(u+32<<20, 10)), 0o644)
		}
		_, err := c.InvokeVM(ctx, clone.ID, ev(`{"op":"eat","mib":160}`), client.InvokeOptions{})
		wantAPIError(t, err, client.ErrVMFailed, 502, "vm process exited during the invocation: killed by the VM's memory limit (")
		v := waitState(t, c, clone.ID, "failed", 10*time.Second)
		if !strings.Contains(v.Reason, "killed by the VM's memory limit (") || !strings.Contains(v.Reason, "OOM kill") ||
			strings.Contains(v.Reason, "guest ran out of memory") {
			t.Errorf("reason %q does not lead with the memory limit", v.Reason)
		}
		t.Logf("reason: %s", v.Reason)
		if _, err := os.Stat(cg); !os.IsNotExist(err) {
			t.Errorf("cgroup of the failed vm not removed: %v", err)
		}
	})
}

// checkConfinedVM checks vm's QEMU runs as a VM user of its own (uids maps
// the uids seen to their VMs), with no capabilities, a seccomp sandbox, no
// daemon environment, and in its own memory cgroup with the VM's limit.
func checkConfinedVM(t *testing.T, vm *client.VM, uids map[string]string) {
	t.Helper()
	st := procStatus(t, vm.PID)
	uid := strings.Fields(st["Uid"])
	if len(uid) != 4 || uid[0] != uid[1] || uid[0] != uid[2] || uid[0] != uid[3] {
		t.Fatalf("vm %s: Uid %q: real, effective, saved and filesystem ids differ", vm.ID, st["Uid"])
	}
	if n, _ := strconv.Atoi(uid[0]); n < daemon.DefaultVMUIDBase {
		t.Errorf("vm %s runs as uid %s, not one of thaw's VM users", vm.ID, uid[0])
	}
	if other, dup := uids[uid[0]]; dup {
		t.Errorf("vms %s and %s share uid %s", other, vm.ID, uid[0])
	}
	uids[uid[0]] = vm.ID
	if st["CapEff"] != "0000000000000000" || st["CapPrm"] != "0000000000000000" {
		t.Errorf("vm %s has capabilities: eff %s prm %s", vm.ID, st["CapEff"], st["CapPrm"])
	}
	if st["Seccomp"] != "2" || st["NoNewPrivs"] != "1" {
		t.Errorf("vm %s: Seccomp %q NoNewPrivs %q, want a seccomp filter", vm.ID, st["Seccomp"], st["NoNewPrivs"])
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", vm.PID))
	if !bytes.Contains(cmdline, []byte("\x00-sandbox\x00"+qemu.Sandbox+"\x00")) {
		t.Errorf("vm %s: no -sandbox %s in %q", vm.ID, qemu.Sandbox, cmdline)
	}
	if bytes.Contains(cmdline, []byte("exec:")) {
		t.Errorf("vm %s: exec: on the command line", vm.ID)
	}
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", vm.PID))
	if bytes.Contains(environ, []byte("THAW_TOKEN")) || bytes.Contains(environ, []byte("HOME=")) {
		t.Errorf("vm %s inherited the daemon's environment: %q", vm.ID, environ)
	}
	cg := memoryCgroup(t, vm.PID)
	if filepath.Base(cg) != vm.ID || !strings.HasPrefix(filepath.Base(filepath.Dir(cg)), "thaw-") {
		t.Errorf("vm %s is in cgroup %s", vm.ID, cg)
	}
	limit, _ := os.ReadFile(filepath.Join(cg, "memory.limit_in_bytes"))
	if want := fmt.Sprint((256 + daemon.DefaultVMMemoryOverheadMiB) << 20); strings.TrimSpace(string(limit)) != want {
		t.Errorf("vm %s memory limit %s, want %s", vm.ID, limit, want)
	}
}
