package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// argsCase is a VM spec, its descriptors and the QEMU arguments they make.
type argsCase struct {
	name string
	spec vmm.Spec
	fds  Descriptors
	want []string
}

func TestArgs(t *testing.T) {
	tests := []argsCase{bootingArgs(), restoringArgs()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			got := Args(&spec, tt.fds)
			for i := 0; i < max(len(got), len(tt.want)); i++ {
				var g, w string
				if i < len(got) {
					g = got[i]
				}
				if i < len(tt.want) {
					w = tt.want[i]
				}
				if g != w {
					t.Fatalf("argument %d is %q, want %q\ngot:  %q\nwant: %q", i, g, w, got, tt.want)
				}
			}
		})
	}
}

// bootingArgs is a booting VM: shared memory, two disks, TCG.
func bootingArgs() argsCase {
	return argsCase{
		name: "booting VM: shared memory, two disks, TCG",
		spec: vmm.Spec{
			ID: "vm-0123456789ab", RunDir: "/var/lib/thaw/run/vm-0123456789ab",
			MemoryMiB: 256, VCPUs: 2, Accel: vmm.AccelTCG,
			Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img",
			Cmdline: "console=ttyS0 root=/dev/vda ro quiet thaw.function=hello",
			Disks: []vmm.Disk{
				{Path: "/img/rootfs.ext4", ReadOnly: true},
				{Path: "/var/lib/thaw/functions/hello/code.ext4"},
			},
			Memory: vmm.Memory{Path: "/var/lib/thaw/run/vm-0123456789ab/memory", Shared: true},
			GenID:  "6f1c2b9e-8a4d-4f0e-9b7a-3c5d2e1f0a9b",
		},
		fds: Descriptors{QMP: 4, Agent: 5, Console: 6, Disks: []int{7, 8}, Tap: 9},
		want: []string{
			"-name", "thaw-vm-0123456789ab",
			"-machine", "pc,accel=tcg,memory-backend=mem",
			"-cpu", "max,avx2=off",
			"-smp", "2",
			"-m", "256M",
			"-object", "memory-backend-file,id=mem,size=256M,mem-path=/var/lib/thaw/run/vm-0123456789ab/memory,share=on",
			"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-vga", "none",
			"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
			"-kernel", "/img/vmlinuz",
			"-initrd", "/img/initrd.img",
			"-append", "console=ttyS0 root=/dev/vda ro quiet thaw.function=hello",
			"-add-fd", "fd=7,set=1",
			"-drive", "file=/dev/fdset/1,if=none,id=disk0,format=raw,readonly=on",
			"-device", "virtio-blk-pci,drive=disk0",
			"-add-fd", "fd=8,set=2",
			"-drive", "file=/dev/fdset/2,if=none,id=disk1,format=raw",
			"-device", "virtio-blk-pci,drive=disk1",
			"-netdev", "tap,id=net0,fd=9,vhost=off",
			"-device", "virtio-net-pci,netdev=net0,romfile=,mac=52:54:00:12:34:56",
			"-device", "virtio-balloon-pci,free-page-reporting=on",
			"-device", "virtio-serial-pci",
			"-device", "vmgenid,guid=6f1c2b9e-8a4d-4f0e-9b7a-3c5d2e1f0a9b",
			"-chardev", "socket,id=agent,fd=5",
			"-device", "virtserialport,chardev=agent,name=org.thaw.agent",
			"-chardev", "socket,id=console,fd=6",
			"-serial", "chardev:console",
			"-chardev", "socket,id=qmp,fd=4",
			"-mon", "chardev=qmp,mode=control",
		},
	}
}

// restoringArgs is a restoring VM: private memory, incoming migration, KVM.
func restoringArgs() argsCase {
	return argsCase{
		name: "restoring VM: private memory, incoming migration, KVM",
		spec: vmm.Spec{
			ID: "vm-ba9876543210", RunDir: "/run/thaw/vm-ba9876543210",
			MemoryMiB: 512, VCPUs: 1, Accel: vmm.AccelKVM,
			Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img", Cmdline: "console=ttyS0",
			Disks:    []vmm.Disk{{Path: "/img/rootfs.ext4", ReadOnly: true}},
			Memory:   vmm.Memory{Path: "/data/snapshots/snap-2b90cd00dc32/memory", Shared: false, File: vmm.FileUse{KeepIntact: true}, Align: 2 << 20},
			Incoming: true, GenID: "0d6b4c2a-1e3f-4a5b-8c7d-9e0f1a2b3c4d",
		},
		fds: Descriptors{QMP: 3, Agent: 4, Console: 5, Disks: []int{6}},
		want: []string{
			"-name", "thaw-vm-ba9876543210",
			"-machine", "pc,accel=kvm,memory-backend=mem",
			"-cpu", "host",
			"-smp", "1",
			"-m", "512M",
			"-object", "memory-backend-file,id=mem,size=512M,mem-path=/data/snapshots/snap-2b90cd00dc32/memory,share=off,align=2097152",
			"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-vga", "none",
			"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
			"-kernel", "/img/vmlinuz",
			"-initrd", "/img/initrd.img",
			"-append", "console=ttyS0",
			"-add-fd", "fd=6,set=1",
			"-drive", "file=/dev/fdset/1,if=none,id=disk0,format=raw,readonly=on",
			"-device", "virtio-blk-pci,drive=disk0",
			"-netdev", "user,id=net0,restrict=on",
			"-device", "virtio-net-pci,netdev=net0,romfile=,mac=52:54:00:12:34:56",
			"-device", "virtio-balloon-pci,free-page-reporting=on",
			"-device", "virtio-serial-pci",
			"-device", "vmgenid,guid=0d6b4c2a-1e3f-4a5b-8c7d-9e0f1a2b3c4d",
			"-chardev", "socket,id=agent,fd=4",
			"-device", "virtserialport,chardev=agent,name=org.thaw.agent",
			"-chardev", "socket,id=console,fd=5",
			"-serial", "chardev:console",
			"-chardev", "socket,id=qmp,fd=3",
			"-mon", "chardev=qmp,mode=control",
			"-incoming", "defer",
		},
	}
}

func TestArgsDoesNotModifySpec(t *testing.T) {
	spec := vmm.Spec{ID: "vm-0123456789ab", RunDir: "/run/x", MemoryMiB: 128, VCPUs: 1, Accel: vmm.AccelTCG,
		Kernel: "k", Initrd: "i", Disks: []vmm.Disk{{Path: "d"}}, Memory: vmm.Memory{Path: "m"}}
	before := spec
	before.Disks = append([]vmm.Disk(nil), spec.Disks...)
	_ = Args(&spec, Descriptors{Disks: []int{3}})
	if spec.ID != before.ID || spec.Memory.Path != before.Memory.Path || len(spec.Disks) != 1 || spec.Disks[0] != before.Disks[0] {
		t.Fatalf("Args modified the spec: %+v", spec)
	}
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/qemu.log"
	if got := logTail(path, 10); got != "" {
		t.Fatalf("logTail(missing) = %q, want empty", got)
	}
	if err := os.WriteFile(path, []byte("qemu-system-x86_64: -drive file=x:\n  Could not open 'x':\tNo such file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		n    int
		want string
	}{
		{n: 400, want: "qemu-system-x86_64: -drive file=x: Could not open 'x': No such file"},
		{n: 13, want: "No such file"},
	}
	for _, tt := range tests {
		if got := logTail(path, tt.n); got != tt.want {
			t.Errorf("logTail(n=%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
	if got := logTail(path, 400); strings.Contains(got, "\n") {
		t.Errorf("logTail kept a newline: %q", got)
	}
}

func TestCappedLog(t *testing.T) {
	path := t.TempDir() + "/console.log"
	c, err := newCappedLog(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	head := strings.Repeat("a", 100)
	body := strings.Repeat("b", 3*tailBytes)
	last := "the guest's last words"
	for _, p := range []string{head, body, last} {
		if n, err := c.Write([]byte(p)); err != nil || n != len(p) {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	got := string(b)
	if !strings.HasPrefix(got, head+"\n[thaw: output beyond 100 bytes was dropped: ") {
		t.Fatalf("log starts %.200q", got)
	}
	if !strings.HasSuffix(got, last) {
		t.Errorf("log does not end with the newest output: ...%q", got[len(got)-40:])
	}
	if len(b) > 100+tailBytes+200 {
		t.Errorf("log is %d bytes, over the limit plus the tail", len(b))
	}
	want := fmt.Sprintf("dropped: %d bytes; the last %d follow]", len(body)+len(last)-tailBytes, tailBytes)
	if !strings.Contains(got, want) {
		t.Errorf("log lacks %q", want)
	}
	if _, err := c.Write([]byte("x")); err == nil {
		t.Errorf("write after close succeeded")
	}
}

func TestCappedLogUnderLimit(t *testing.T) {
	path := t.TempDir() + "/console.log"
	c, _ := newCappedLog(path, 1<<20)
	c.Write([]byte("boot\n"))
	c.Close()
	if b, _ := os.ReadFile(path); string(b) != "boot\n" {
		t.Fatalf("log = %q", b)
	}
}

// TestPrepare checks what QEMU inherits: the interposer preloaded from a
// descriptor, a file table for the paths QEMU opens itself, read-only
// snapshot memory, a created boot memory file, and nothing of the
// daemon's environment.
func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"shim.so", "vmlinuz", "initrd", "rootfs", "code", "snapmem"} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600)
	}
	t.Setenv("THAW_TOKEN", "secret")
	spec := vmm.Spec{ID: "vm-1", RunDir: dir, MemoryMiB: 128, VCPUs: 1, Accel: vmm.AccelTCG,
		Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd"),
		Disks: []vmm.Disk{{Path: filepath.Join(dir, "rootfs"), ReadOnly: true}, {Path: filepath.Join(dir, "code")}},
		Memory: vmm.Memory{Path: filepath.Join(dir, "snapmem"), Backing: vmm.Backing{Kind: vmm.BackedByLayout, Layout: &vmm.Layout{
			Size: 128 << 20, Ranges: []vmm.Range{{Length: 4096, Source: vmm.SourceMemoryFile}}, Populate: true, Stats: filepath.Join(dir, "stats")}}}}
	l, err := prepare(&spec, filepath.Join(dir, "shim.so"))
	defer l.closeAll()
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(l.env, "\n")
	for _, want := range []string{"LD_PRELOAD=/proc/self/fd/3", "THAW_SHIM_MODE=layout",
		"THAW_SHIM_FD_0=", ":" + spec.Kernel, ":" + spec.Initrd, ":" + spec.Memory.Path, ":" + filepath.Join(dir, LayoutFile), ":" + filepath.Join(dir, "stats")} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(env, "THAW_TOKEN") || !strings.Contains(env, "THAW_SHIM_POPULATE=read") {
		t.Errorf("environment leaks the daemon's, or lacks the interposer's settings:\n%s", env)
	}
	if l.fds.QMP != 4 || l.fds.Agent != 5 || l.fds.Console != 6 || len(l.fds.Disks) != 2 {
		t.Errorf("descriptors %+v", l.fds)
	}
	for i, f := range l.files {
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name() == spec.Memory.Path && fl&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("snapshot memory passed writable (descriptor %d)", i+3)
		}
		if f.Name() == spec.Disks[0].Path && fl&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("read-only disk passed writable")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "stats")); err != nil {
		t.Errorf("stats file not created for the interposer: %v", err)
	}

	boot := spec
	boot.Memory = vmm.Memory{Path: filepath.Join(dir, "bootmem"), Shared: true}
	l2, err := prepare(&boot, filepath.Join(dir, "shim.so"))
	defer l2.closeAll()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(boot.Memory.Path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("boot memory file: %v %v", st, err)
	}

	missing := spec
	missing.Kernel = filepath.Join(dir, "nope")
	l3, err := prepare(&missing, filepath.Join(dir, "shim.so"))
	l3.closeAll()
	if err == nil || !strings.Contains(err.Error(), "guest image") {
		t.Errorf("missing kernel: %v", err)
	}
}
