// Package hugetest gives tests a hugetlbfs mount backed by a huge page pool
// they grow for themselves and shrink back when done. Test packages run in
// parallel, so pool changes are read-modify-writes under a host-wide lock.
package hugetest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	nrPath   = "/proc/sys/vm/nr_hugepages" // 2 MiB pages on x86-64
	lockPath = "/run/thaw-hugetest.lock"
)

// Mount grows the 2 MiB huge page pool by pages, mounts hugetlbfs on a
// fresh directory and returns it; cleanup unmounts and gives the pages
// back. Tests are skipped, saying why, where that needs rights the test
// lacks.
func Mount(t *testing.T, pages int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("configuring huge pages and mounting hugetlbfs needs root")
	}
	if err := adjust(t, pages); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := adjust(t, -pages); err != nil {
			t.Error(err)
		}
	})
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "hugetlbfs", "-o", "pagesize=2M,mode=0700", "thaw-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount hugetlbfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

func adjust(t *testing.T, delta int) error {
	lk, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lk.Close()
	if err := unix.Flock(int(lk.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	b, err := os.ReadFile(nrPath)
	if err != nil {
		return err
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	want := max(cur+delta, 0)
	if err := os.WriteFile(nrPath, []byte(strconv.Itoa(want)), 0o644); err != nil {
		return fmt.Errorf("set %s to %d: %w", nrPath, want, err)
	}
	b, _ = os.ReadFile(nrPath)
	if got, _ := strconv.Atoi(strings.TrimSpace(string(b))); delta > 0 && got < want {
		_ = os.WriteFile(nrPath, []byte(strconv.Itoa(cur)), 0o644)
		t.Skipf("the kernel gave %d of %d huge pages (memory too fragmented)", got-cur, delta)
	}
	return nil
}
