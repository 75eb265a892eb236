package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestFSDAXStoreInGuest: the memory store's filesystem-DAX tier on real
// kernel DAX code, on a host without persistent memory.
// scripts/fsdax-guest.sh boots the guest kernel with part of its RAM
// declared persistent (memmap=128M!256M: a legacy pmem device), mounts ext4
// -o dax on it and runs internal/store's TestFSDAX there.
func TestFSDAXStoreInGuest(t *testing.T) {
	img := imageDir(t)
	for _, tool := range []string{"qemu-system-x86_64", "cpio", "gzip", "dpkg-deb", "apt-get"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (make deps installs it)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", repoPath("scripts/fsdax-guest.sh"), img)
	cmd.Dir = repoPath(".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fs-DAX store test in a guest: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "fsdax_test.go") || strings.Contains(line, "dax=always") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
