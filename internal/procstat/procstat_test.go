package procstat

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadSelf(t *testing.T) {
	before, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Touch fresh memory: minor faults must grow.
	b := make([]byte, 8<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	after, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	d := Since(after, before)
	if d.MinorFaults == 0 || after.RssAnonKiB == 0 {
		t.Fatalf("counters did not move: %+v", d)
	}
	if _, err := Read(1 << 30); err == nil {
		t.Fatal("reading a pid that does not exist succeeded")
	}
}

func TestHugeAnon(t *testing.T) {
	nm := []byte(`7f0000000000 default file=/mnt/huge/snap-1.mem huge anon=26 dirty=26 mapped=50 N0=50 kernelpagesize_kB=2048
7f1000000000 default anon=300 dirty=300 N0=300 kernelpagesize_kB=4
7f2000000000 default file=/mnt/huge/snap-1.mem huge mapped=2 N0=2 kernelpagesize_kB=2048
7f3000000000 default file=/mnt/giga/x huge anon=1 dirty=1 N0=1 kernelpagesize_kB=1048576
`)
	if got, want := hugeAnon(nm), uint64(26*2<<20+1<<30); got != want {
		t.Fatalf("hugeAnon = %d, want %d (4 KiB anonymous pages are not huge pages)", got, want)
	}
}

func TestExited(t *testing.T) {
	if Exited(os.Getpid()) {
		t.Fatal("this process counts as exited")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start true(1): %v", err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for !Exited(pid) { // a zombie until waited for
		if time.Now().After(deadline) {
			t.Fatal("an exited, unwaited child does not count as exited")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Wait()
	if !Exited(pid) {
		t.Fatal("a reaped process counts as running")
	}
}

func TestCPUTime(t *testing.T) {
	// utime 150 and stime 25 ticks: fields 14 and 15 (the command may hold spaces).
	line := "1234 (qemu system) S 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 3 0 100 1000 50"
	f := strings.Fields(line[strings.LastIndexByte(line, ')')+1:])
	if got := cpuMS(f); got != 1750 {
		t.Fatalf("cpuMS = %v, want 1750", got)
	}
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the kernel's own account (getrusage) says this process
	// used 200 ms more CPU, however busy the host is, then compare.
	used := func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
	}
	x, start := 0, used()
	for deadline := time.Now().Add(30 * time.Second); used()-start < 200 && time.Now().Before(deadline); {
		x++
	}
	spun := used() - start
	after, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if spun < 200 || float64(after-before) < spun-50 {
		t.Fatalf("%.0f ms of spinning by getrusage (%d rounds) counted as %v ms of CPU", spun, x, after-before)
	}
	c, err := Read(os.Getpid())
	if err != nil || c.CPUTotalMS < after {
		t.Fatalf("Read: CPUTotalMS %v < %v (%v)", c.CPUTotalMS, after, err)
	}
	if _, err := CPUTime(1 << 30); err == nil {
		t.Fatal("CPU time of a pid that does not exist")
	}
}
