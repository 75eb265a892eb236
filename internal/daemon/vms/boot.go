package vms

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/progress"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// BaseSpec is the spec of VM id of fn: the guest image's kernel, initrd
// and root disk, fn's code disk and dependency layer, on the host's
// accelerator. The caller adds its memory.
func (m *Manager) BaseSpec(id string, fn *catalog.Function) vmm.Spec {
	accel, tscKHz := m.d.Host()
	im := m.d.Image
	cmdline := im.Cmdline + " thaw.page_reporting_order=0 thaw.function=" + fn.Name
	if tscKHz > 0 {
		// The host's TSC frequency: the guest takes it instead of
		// calibrating, which a busy host can get wrong (internal/tsc).
		cmdline += " tsc_early_khz=" + strconv.Itoa(tscKHz)
	}
	spec := vmm.Spec{
		ID: id, RunDir: filepath.Join(m.cfg.RunDir, id), GenID: vmm.NewGenID(),
		MemoryMiB: fn.MemoryMiB, VCPUs: fn.VCPUs, Accel: accel,
		Kernel: im.Path(im.KernelFile()),
		Initrd: im.Path(guestimage.Initrd),
		// thaw.page_reporting_order=0: the agent makes free page reporting
		// report freed pages of every order, not only 2 MiB blocks.
		Cmdline: cmdline,
		Disks: []vmm.Disk{
			{Path: im.Path(guestimage.Rootfs), ReadOnly: true},
			{Path: fn.Disk, ReadOnly: true},
		},
	}
	m.d.AttachDeps(&spec, fn)
	return spec
}

// Boot boots a VM of configuration fn for version from the guest image
// and waits until its agent answers (or fails). Guest RAM lives in a
// shared memory file in the VM's run directory, so the VM can be
// snapshotted.
func (m *Manager) Boot(ctx context.Context, fn *catalog.Function, version int) (vm *catalog.VM, err error) {
	ctx, end := m.d.Spans.Boot(ctx, fn.Name)
	defer func() {
		id := ""
		if vm != nil {
			id = vm.ID
		}
		end(id, err)
	}()
	if err := m.d.CheckLayer(fn); err != nil {
		return nil, fmt.Errorf("%w: %v; create the function again", errdefs.ErrConflict, err)
	}
	progress.Phase(ctx, "admission")
	release, err := m.d.Admit(ctx, fn)
	if err != nil {
		return nil, err
	}
	id := newID()
	spec := m.BaseSpec(id, fn)
	spec.Memory = vmm.Memory{Path: filepath.Join(spec.RunDir, "memory"), Shared: true}
	rec := &catalog.VM{ID: id, Function: fn.Name, Version: version}
	start := time.Now()
	progress.Phase(ctx, "starting vmm")
	vctx, vend := m.d.Spans.VMMStart(ctx, id, fn.Name)
	lv, err := m.Start(vctx, rec, spec, fn, release)
	vend(err)
	if err != nil {
		return nil, err
	}
	lv.Mu.Lock()
	defer lv.Mu.Unlock()
	progress.Phase(ctx, "booting")
	if err := m.awaitGuest(ctx, lv, start); err != nil {
		return nil, err
	}
	rec.BootMS = ms(time.Since(start))
	rec.State = catalog.StateRunning
	m.Mark(lv, catalog.StateRunning)
	if err := m.d.Catalog.PutVM(ctx, rec); err != nil {
		return nil, err
	}
	progress.Phase(ctx, "agent ready")
	m.d.Log.Info("vm booted", "vm", id, "function", fn.Name, "boot_ms", rec.BootMS)
	return rec, nil
}

// awaitGuest waits for a booting VM's agent (its lock held) and checks
// that its function can run; it stops the VM when not.
func (m *Manager) awaitGuest(ctx context.Context, lv *Live, start time.Time) error {
	ready, err := m.ConnectAgent(ctx, lv, m.cfg.BootTimeout)
	if err != nil {
		reason := fmt.Sprintf("boot: guest agent not ready after %s: %v", time.Since(start).Round(time.Millisecond), err)
		if !lv.Exited() { // else err says why the VMM ended
			reason = StopReason(lv, reason)
		}
		m.Stop(context.WithoutCancel(ctx), lv, catalog.StateFailed, reason)
		return fmt.Errorf("%w: vm %s: %s", errdefs.ErrVMFailed, lv.ID, reason)
	}
	if fe := ready.FunctionError; fe != nil {
		// A function that cannot be invoked is never left running (nor
		// snapshotted): the boot fails with the guest's traceback.
		reason := fmt.Sprintf("function %s cannot be imported: %s: %s", lv.Fn.Name, fe.Type, fe.Message)
		m.Stop(context.WithoutCancel(ctx), lv, catalog.StateFailed, reason)
		return importFailure{fmt.Errorf("%w: vm %s: %s\n%s", errdefs.ErrVMFailed, lv.ID, reason, strings.TrimRight(fe.Traceback, "\n"))}
	}
	if err := m.d.CheckBootEnv(ctx, lv.Fn, lv.Agent); err != nil {
		m.Stop(context.WithoutCancel(ctx), lv, catalog.StateFailed, "boot: "+err.Error())
		return fmt.Errorf("%w: vm %s: %v", errdefs.ErrVMFailed, lv.ID, err)
	}
	return nil
}

// importFailure is a boot's ErrVMFailed that is also ErrImport, without
// saying so twice in its message.
type importFailure struct{ error }

func (f importFailure) Unwrap() error      { return f.error }
func (importFailure) Is(target error) bool { return target == errdefs.ErrImport }

// newID is a new VM id.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "vm-" + hex.EncodeToString(b[:])
}
