package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// TestVMEndReasons ends clones of one snapshot in every way a guest or its
// QEMU can end, and checks that the API's error and the VM's reason lead
// with the cause. (The memory limit of the VM's cgroup: TestQEMUConfinement.)
func TestVMEndReasons(t *testing.T) {
	parallel(t)
	ctx := ctxT(t)
	e, _, snap := hostileEnv(t, t.TempDir(), nil)
	c := e.c
	clone := func(t *testing.T) *client.VM { return restoreVM(t, c, snap.ID, "vanilla") }
	// ended checks the invocation's error and the failed VM's reason (the
	// supervisor may record the VM's end before the invocation does, without
	// the invocation's words).
	ended := func(t *testing.T, vm *client.VM, err error, kind error, status int, want, not string) {
		t.Helper()
		wantAPIError(t, err, kind, status, want)
		v := waitState(t, c, vm.ID, "failed", 20*time.Second)
		cause := strings.TrimPrefix(want, "vm process exited during the invocation: ")
		if !strings.Contains(v.Reason, cause) || not != "" && strings.Contains(v.Reason, not) {
			t.Errorf("reason %q: want %q, not %q", v.Reason, cause, not)
		}
		t.Logf("reason: %s", v.Reason)
	}
	invoke := func(vm *client.VM, event string, timeout time.Duration) error {
		_, err := c.InvokeVM(ctx, vm.ID, ev(event), client.InvokeOptions{Timeout: timeout})
		return err
	}
	t.Run("the guest runs out of its memory", func(t *testing.T) {
		vm := clone(t)
		err := invoke(vm, `{"op":"eat","mib":400}`, 0)
		ended(t, vm, err, client.ErrVMFailed, 502,
			"vm process exited during the invocation: guest ran out of memory (256 MiB): the guest kernel's OOM killer found nothing to kill but the agent (pid 1)",
			"memory limit")
	})
	t.Run("the agent exits", func(t *testing.T) {
		vm := clone(t)
		err := invoke(vm, `{"op":"exit","code":3}`, 0)
		ended(t, vm, err, client.ErrVMFailed, 502, "the agent (pid 1) exited with status 3 and the guest kernel panicked; guest console: Kernel panic - not syncing: Attempted to kill init!", "")
	})
	t.Run("the agent powers the VM off", func(t *testing.T) {
		vm := clone(t)
		err := invoke(vm, `{"op":"fatal","reason":"asked by the e2e test"}`, 0)
		ended(t, vm, err, client.ErrVMFailed, 502, "the guest agent powered the VM off: asked by the e2e test", "")
	})
	t.Run("the invocation times out", func(t *testing.T) {
		vm := clone(t)
		err := invoke(vm, `{"op":"sleep","s":600}`, 2*time.Second)
		ended(t, vm, err, client.ErrTimeout, 504, "invocation timed out after 2s; guest killed", "")
		if v, _ := c.GetVM(ctx, vm.ID); !strings.Contains(v.Reason, "qemu killed by signal 9 (SIGKILL)") {
			t.Errorf("reason %q lacks how qemu ended", v.Reason)
		}
	})
	t.Run("qemu crashes", func(t *testing.T) {
		vm := clone(t)
		if err := syscall.Kill(vm.PID, syscall.SIGSEGV); err != nil {
			t.Fatal(err)
		}
		v := waitState(t, c, vm.ID, "failed", 20*time.Second)
		if !strings.HasPrefix(v.Reason, "qemu crashed (SIGSEGV); qemu killed by signal 11 (SIGSEGV)") {
			t.Errorf("reason %q", v.Reason)
		}
		if _, err := c.InvokeVM(context.Background(), vm.ID, ev(`{}`), client.InvokeOptions{}); err == nil {
			t.Error("the crashed vm was invoked")
		}
	})
}
