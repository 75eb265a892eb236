package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The memory store's persistent-memory tiers on real kernel DAX code, on
// hosts without persistent memory: scripts/dax-guest.sh boots the guest
// kernel with part of its RAM declared persistent (memmap=128M!256M: a
// legacy pmem namespace) and runs internal/store's tests there.

// TestFSDAXStoreInGuest: ext4 -o dax on /dev/pmem0, TestFSDAX.
func TestFSDAXStoreInGuest(t *testing.T) {
	parallel(t)
	daxGuest(t, "fsdax", "fsdax_test.go", "dax=always")
}

// TestDevDAXStoreInGuest: the namespace reconfigured as /dev/dax0.0,
// TestDevDAX (the store's index, copies and clone ranges, the kernel's
// refusals, and the interposer mapping a VM's range shared).
func TestDevDAXStoreInGuest(t *testing.T) {
	parallel(t)
	daxGuest(t, "devdax", "devdax_device_test.go", "dax0.0 size", "thaw-shim")
}

func daxGuest(t *testing.T, mode string, show ...string) {
	img := imageDir(t)
	for _, tool := range []string{"qemu-system-x86_64", "cpio", "gzip", "dpkg-deb", "apt-get"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps installs it)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", repoPath("scripts/dax-guest.sh"), mode, img)
	cmd.Dir = repoPath(".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s store test in a guest: %v\n%s", mode, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, s := range show {
			if strings.Contains(line, s) {
				t.Log(strings.TrimSpace(line))
				break
			}
		}
	}
}
