package qemu

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/vmm"
)

func TestArgs(t *testing.T) {
	tests := []struct {
		name string
		spec vmm.Spec
		want []string
	}{
		{
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
			},
			want: []string{
				"-name", "thaw-vm-0123456789ab",
				"-machine", "pc,accel=tcg,memory-backend=mem",
				"-cpu", "max,avx2=off",
				"-smp", "2",
				"-m", "256M",
				"-object", "memory-backend-file,id=mem,size=256M,mem-path=/var/lib/thaw/run/vm-0123456789ab/memory,share=on",
				"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-vga", "none",
				"-kernel", "/img/vmlinuz",
				"-initrd", "/img/initrd.img",
				"-append", "console=ttyS0 root=/dev/vda ro quiet thaw.function=hello",
				"-drive", "file=/img/rootfs.ext4,if=none,id=disk0,format=raw,readonly=on",
				"-device", "virtio-blk-pci,drive=disk0",
				"-drive", "file=/var/lib/thaw/functions/hello/code.ext4,if=none,id=disk1,format=raw",
				"-device", "virtio-blk-pci,drive=disk1",
				"-netdev", "user,id=net0",
				"-device", "virtio-net-pci,netdev=net0,romfile=",
				"-device", "virtio-balloon-pci,free-page-reporting=on",
				"-device", "virtio-serial-pci",
				"-chardev", "socket,id=agent,path=/var/lib/thaw/run/vm-0123456789ab/agent.sock,server=on,wait=off",
				"-device", "virtserialport,chardev=agent,name=org.thaw.agent",
				"-serial", "file:/var/lib/thaw/run/vm-0123456789ab/console.log",
				"-qmp", "unix:/var/lib/thaw/run/vm-0123456789ab/qmp.sock,server=on,wait=off",
			},
		},
		{
			name: "restoring VM: private memory, incoming migration, KVM",
			spec: vmm.Spec{
				ID: "vm-ba9876543210", RunDir: "/run/thaw/vm-ba9876543210",
				MemoryMiB: 512, VCPUs: 1, Accel: vmm.AccelKVM,
				Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img", Cmdline: "console=ttyS0",
				Disks:    []vmm.Disk{{Path: "/img/rootfs.ext4", ReadOnly: true}},
				Memory:   vmm.Memory{Path: "/data/snapshots/snap-2b90cd00dc32/memory", Shared: false, Env: []string{"LD_PRELOAD=/x.so"}, Align: 2 << 20},
				Incoming: true,
			},
			want: []string{
				"-name", "thaw-vm-ba9876543210",
				"-machine", "pc,accel=kvm,memory-backend=mem",
				"-cpu", "host",
				"-smp", "1",
				"-m", "512M",
				"-object", "memory-backend-file,id=mem,size=512M,mem-path=/data/snapshots/snap-2b90cd00dc32/memory,share=off,align=2097152",
				"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-vga", "none",
				"-kernel", "/img/vmlinuz",
				"-initrd", "/img/initrd.img",
				"-append", "console=ttyS0",
				"-drive", "file=/img/rootfs.ext4,if=none,id=disk0,format=raw,readonly=on",
				"-device", "virtio-blk-pci,drive=disk0",
				"-netdev", "user,id=net0",
				"-device", "virtio-net-pci,netdev=net0,romfile=",
				"-device", "virtio-balloon-pci,free-page-reporting=on",
				"-device", "virtio-serial-pci",
				"-chardev", "socket,id=agent,path=/run/thaw/vm-ba9876543210/agent.sock,server=on,wait=off",
				"-device", "virtserialport,chardev=agent,name=org.thaw.agent",
				"-serial", "file:/run/thaw/vm-ba9876543210/console.log",
				"-qmp", "unix:/run/thaw/vm-ba9876543210/qmp.sock,server=on,wait=off",
				"-incoming", "defer",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			got := Args(&spec)
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

func TestArgsDoesNotModifySpec(t *testing.T) {
	spec := vmm.Spec{ID: "vm-0123456789ab", RunDir: "/run/x", MemoryMiB: 128, VCPUs: 1, Accel: vmm.AccelTCG,
		Kernel: "k", Initrd: "i", Disks: []vmm.Disk{{Path: "d"}}, Memory: vmm.Memory{Path: "m"}}
	before := spec
	before.Disks = append([]vmm.Disk(nil), spec.Disks...)
	_ = Args(&spec)
	if spec.ID != before.ID || spec.Memory.Path != before.Memory.Path || len(spec.Disks) != 1 || spec.Disks[0] != before.Disks[0] {
		t.Fatalf("Args modified the spec: %+v", spec)
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{in: "/data/snapshots/.tmp-snap-1/vmstate", want: `'/data/snapshots/.tmp-snap-1/vmstate'`},
		{in: "", want: `''`},
		{in: "/data/it's here/vmstate", want: `'/data/it'\''s here/vmstate'`},
		{in: "'", want: `''\'''`},
		{in: "a''b", want: `'a'\'''\''b'`},
		{in: `/x/$(reboot)/"q"/\n/*/vmstate; rm -rf /`, want: `'/x/$(reboot)/"q"/\n/*/vmstate; rm -rf /'`},
	}
	sh, shErr := exec.LookPath("sh")
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := shellQuote(tt.in)
			if got != tt.want {
				t.Fatalf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
			}
			if shErr != nil {
				return
			}
			// The shell QEMU runs for "exec:" turns the word back into the
			// original string, whatever it contains.
			out, err := exec.Command(sh, "-c", "printf '%s' "+got).Output()
			if err != nil {
				t.Fatalf("sh -c printf %s: %v", got, err)
			}
			if string(out) != tt.in {
				t.Fatalf("sh read %s as %q, want %q", got, out, tt.in)
			}
		})
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
