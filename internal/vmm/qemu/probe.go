package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// ProbeMarker is printed by the guest initramfs when booted with
// thaw.probe=1, just before it powers off.
const ProbeMarker = "THAW-PROBE-OK"

// ProbeAccel boots the guest kernel and initramfs in probe mode on accel and
// reports whether it reached the initramfs. Opening /dev/kvm is not enough:
// on hosts with paravirtual KVM (kvm_pvm) KVM_CREATE_VM succeeds but a stock
// kernel hangs right after the boot loader, so only a booted guest counts.
func ProbeAccel(ctx context.Context, accel vmm.Accel, kernel, initrd, workDir string, timeout time.Duration) vmm.ProbeResult {
	res := vmm.ProbeResult{Accel: accel}
	if accel == vmm.AccelKVM {
		f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
		if err != nil {
			res.Detail = "cannot open /dev/kvm: " + err.Error()
			return res
		}
		f.Close()
	}
	dir, err := os.MkdirTemp(workDir, "probe-")
	if err != nil {
		res.Detail = err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	console := filepath.Join(dir, "console.log")
	cpu := "max"
	if accel == vmm.AccelKVM {
		cpu = "host"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, Binary,
		"-machine", "pc,accel="+string(accel), "-cpu", cpu, "-m", "128M", "-smp", "1",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-vga", "none",
		"-sandbox", Sandbox,
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet panic=-1 thaw.probe=1",
		"-serial", "file:"+console)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 { // as every VMM of a root daemon: no network at all
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	res.Duration = time.Since(start)
	out, _ := os.ReadFile(console)
	switch {
	case bytes.Contains(out, []byte(ProbeMarker)):
		res.OK = true
		res.Detail = fmt.Sprintf("guest booted in %s", res.Duration.Round(time.Millisecond))
	case ctx.Err() != nil:
		res.Detail = fmt.Sprintf("guest did not boot within %s", timeout)
	default:
		res.Detail = fmt.Sprintf("qemu failed: %v %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return res
}
