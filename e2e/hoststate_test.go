package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/hoststate"
)

// A daemon leaves the host as it found it: the real thawd, with full
// egress, through a VM and a stop; then through a VM, kill -9, a restart
// (with full egress, or without: any daemon undoes what a dead one left)
// and a stop. Before and after, the test compares the cgroups of every
// hierarchy, /dev/shm, the network links, the nftables tables and
// net.ipv4.ip_forward (first 0, then 1).
//
// The daemon's "host" is a mount and network namespace of the test's own
// (with its own /dev/shm) and a cgroup of the test's own in each hierarchy
// thaw uses: what the daemon changes is all there, and the other daemons
// on this machine neither disturb the comparison nor are disturbed.
func TestHostLeftAsFound(t *testing.T) {
	parallel(t)
	imageDir(t)
	for _, tc := range []struct {
		forward       string
		restartEgress bool
	}{{"0", false}, {"1", true}} {
		t.Run("ip_forward="+tc.forward, func(t *testing.T) {
			h := newHostNS(t)
			h.sh(t, "echo "+tc.forward+" > /proc/sys/net/ipv4/ip_forward")
			outAddr := h.outside(t)
			cgs := privateCgroups(t)
			dataDir := t.TempDir()
			var pids []int // of every daemon started
			before := h.state(t, cgs, dataDir)
			if before.forward != tc.forward || slices.Contains(before.tables, "table inet thaw") {
				t.Fatalf("the namespace before: %+v", before)
			}

			// Start, a VM with full egress, stop.
			d := h.thawd(t, cgs, dataDir, "--allow-full-egress")
			pids = append(pids, d.cmd.Process.Pid)
			vm := bootWide(t, d.c, true, outAddr)
			running := h.state(t, cgs, dataDir)
			checkInUse(t, running, vm.ID, dataDir)
			d.stop(t)
			h.compare(t, "after a stop", before, h.state(t, cgs, dataDir))

			// Start, a VM, kill -9: the host keeps what the daemon changed.
			d = h.thawd(t, cgs, dataDir, "--allow-full-egress")
			pids = append(pids, d.cmd.Process.Pid)
			vm = bootWide(t, d.c, false, outAddr)
			d.kill()
			left := h.state(t, cgs, dataDir)
			if left.forward != "1" || !slices.Contains(left.tables, "table inet thaw") || !hasSuffix(left.cgroups, cgroupName(dataDir)) {
				t.Fatalf("a killed daemon left nothing to clean (the test cannot see what it checks): %+v", left)
			}

			// A restart undoes it at once (or holds it anew), a stop the rest.
			var args []string
			if tc.restartEgress {
				args = append(args, "--allow-full-egress")
			}
			d = h.thawd(t, cgs, dataDir, args...)
			pids = append(pids, d.cmd.Process.Pid)
			restarted := h.state(t, cgs, dataDir)
			if slices.ContainsFunc(restarted.cgroups, func(p string) bool { return strings.Contains(p, strings.TrimPrefix(vm.ID, "vm-")) }) {
				t.Errorf("the killed daemon's VM cgroup outlived the restart: %v", restarted.cgroups)
			}
			if tc.restartEgress {
				bootWide(t, d.c, true, outAddr)
			} else if restarted.forward != tc.forward || slices.Contains(restarted.tables, "table inet thaw") {
				t.Errorf("a daemon without full egress kept what a dead one left: forwarding %s, tables %v", restarted.forward, restarted.tables)
			}
			d.stop(t)
			h.compare(t, "after kill -9, a restart and a stop", before, h.state(t, cgs, dataDir))
			checkNoRecords(t, pids)
		})
	}
}

// bootWide creates (the first time) and boots a function with full
// egress; with reach, its guest must reach the outside server.
func bootWide(t *testing.T, c *client.Client, reach bool, outAddr string) *client.VM {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.GetFunction(ctx, "wide"); err != nil {
		if _, err := c.CreateFunctionFromDir(ctx, "wide", repoPath("e2e/testdata/probe"), 256, 1, client.WithEgress("full")); err != nil {
			t.Fatal(err)
		}
	}
	vm, err := c.BootVM(ctx, "wide")
	if err != nil {
		t.Fatal(err)
	}
	if reach {
		host, port, _ := strings.Cut(outAddr, ":")
		p, _ := strconv.Atoi(port)
		if r := try(t, c, vm.ID, host, p, "hi"); !r.Connected || r.Reply != "outside:hi" {
			t.Fatalf("full egress did not reach the outside: %+v", r)
		}
	}
	return vm
}

// checkInUse checks that the state of a running daemon shows what the
// comparison looks for: otherwise an empty comparison would prove nothing.
func checkInUse(t *testing.T, s hostSnapshot, vm, dataDir string) {
	t.Helper()
	link := "thv" + strings.TrimPrefix(vm, "vm-")
	if s.forward != "1" || !slices.Contains(s.tables, "table inet thaw") || !slices.Contains(s.links, link) {
		t.Errorf("full egress in use, but forwarding %s, tables %v, links %v", s.forward, s.tables, s.links)
	}
	if !hasSuffix(s.cgroups, cgroupName(dataDir)+"/"+vm) {
		t.Errorf("no cgroup of the VM: %v", s.cgroups)
	}
	if !slices.ContainsFunc(s.shm, func(p string) bool { return strings.HasPrefix(p, "/dev/shm/thaw-store/") }) {
		t.Errorf("no memory store in /dev/shm: %v", s.shm)
	}
}

// checkNoRecords checks that no host state record names one of the pids.
func checkNoRecords(t *testing.T, pids []int) {
	t.Helper()
	recs, _ := filepath.Glob(filepath.Join(hoststate.DefaultDir, "*", "*"))
	for _, r := range recs {
		for _, pid := range pids {
			if strings.HasPrefix(filepath.Base(r), strconv.Itoa(pid)+"-") {
				t.Errorf("host state record of daemon %d left: %s", pid, r)
			}
		}
	}
}

func hasSuffix(list []string, suffix string) bool {
	return slices.ContainsFunc(list, func(p string) bool { return strings.HasSuffix(p, "/"+suffix) })
}

// cgroupName is the cgroup parent of the daemon on dataDir.
func cgroupName(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return "thaw-" + hex.EncodeToString(sum[:4])
}

// hostNS is a mount and network namespace held by a sleeping process, with
// a /dev/shm of its own.
type hostNS struct {
	pid int
}

func newHostNS(t *testing.T) *hostNS {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--net", "--propagation", "private", "--", "sh", "-c",
		"mount -t tmpfs -o mode=1777 thaw-test-shm /dev/shm && ip link set lo up && echo ready && exec sleep 3600")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("namespace holder: %q %v", line, err)
	}
	return &hostNS{pid: cmd.Process.Pid}
}

// enter is the command line that runs argv in the namespace.
func (h *hostNS) enter(argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(h.pid), "-m", "-n", "--"}, argv...)
}

// sh runs a shell command in the namespace and returns its output.
func (h *hostNS) sh(t *testing.T, script string) string {
	t.Helper()
	argv := h.enter("sh", "-c", script)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// outside starts an echo server in a namespace beyond the daemon's, linked
// to it by a veth pair, and returns its ip:port.
func (h *hostNS) outside(t *testing.T) string {
	t.Helper()
	n := outsideSlot(t, "")
	ns := fmt.Sprintf("thaw-hs-out-%d-%d", os.Getpid(), n)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	near, far := fmt.Sprintf("10.251.%d.1", n), fmt.Sprintf("10.251.%d.2", n)
	// The veth is created in the daemon's namespace: no netns names there
	// but the host's, which this shell (network namespace only) still sees.
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(h.pid), "-n", "--", "sh", "-c", fmt.Sprintf(
		"ip link add hso%d type veth peer name hsi%d netns %s && ip addr add %s/24 dev hso%d && ip link set hso%d up",
		n, n, ns, near, n, n))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("outside link: %v %s", err, out)
	}
	for _, args := range [][]string{
		{"-n", ns, "addr", "add", far + "/24", "dev", fmt.Sprintf("hsi%d", n)},
		{"-n", ns, "link", "set", fmt.Sprintf("hsi%d", n), "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "route", "add", "default", "via", near},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	startEcho(t, ns, far)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := exec.Command("ip", "netns", "exec", ns, "python3", "-c",
			fmt.Sprintf("import socket; socket.create_connection(('%s', 7000), timeout=1).close()", far)).Run()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outside server: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return far + ":7000"
}

// privateCgroups makes a cgroup of the test's own, below the test's, in
// each v1 hierarchy thaw uses, for the daemon to run in; nil on a v2 host
// (the daemon then runs in the test's cgroup, its parent found by name).
func privateCgroups(t *testing.T) []string {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return nil
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, line := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c != "memory" && c != "cpu" && c != "pids" {
				continue
			}
			dir := filepath.Join("/sys/fs/cgroup", c, parts[2], fmt.Sprintf("hoststate-test-%d-%d", os.Getpid(), rand.IntN(1<<30)))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { removeCgroupTree(dir) })
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// removeCgroupTree removes dir and the groups below it, deepest first
// (whatever a failed run left there).
func removeCgroupTree(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		syscall.Rmdir(dirs[i])
	}
}

// nsThawd is bin/thawd running in a hostNS.
type nsThawd struct {
	cmd  *exec.Cmd
	c    *client.Client
	out  *bytes.Buffer
	done chan struct{}
}

// thawd starts bin/thawd in the namespace and the cgroups cgs, with the
// default memory store (in the namespace's /dev/shm), and waits until it
// answers.
func (h *hostNS) thawd(t *testing.T, cgs []string, dataDir string, args ...string) *nsThawd {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "thawd-hs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "thawd.sock")
	all := append([]string{"--data-dir", dataDir, "--image", imageDir(t), "--accel", "tcg", "--listen", sock,
		"--shim", repoPath("shim/build/libthaw_shim.so"), "--memory", "256"}, args...)
	// The shell puts itself in the cgroups, then becomes thawd (same pid).
	argv := h.enter(append([]string{"sh", "-c", `for d in $THAW_TEST_CGROUPS; do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$@"`,
		"sh", repoPath("bin/thawd")}, all...)...)
	d := &nsThawd{cmd: exec.Command(argv[0], argv[1:]...), c: client.New("unix:" + sock), out: &bytes.Buffer{}, done: make(chan struct{})}
	d.cmd.Env = append(os.Environ(), "THAW_TEST_CGROUPS="+strings.Join(cgs, " "))
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start thawd (make build first): %v", err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(d.kill)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-d.done:
			t.Fatalf("thawd exited: %s", d.out)
		default:
		}
		if _, err := d.c.Info(context.Background()); err == nil {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("thawd did not answer: %s", d.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the daemon as systemd does (SIGTERM) and waits.
func (d *nsThawd) stop(t *testing.T) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("thawd did not stop: %s", d.out)
	}
	if st, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || st.ExitStatus() != 0 {
		t.Errorf("thawd exited with %v: %s", d.cmd.ProcessState, d.out)
	}
	if testing.Verbose() {
		t.Logf("thawd log:\n%s", d.out)
	}
}

func (d *nsThawd) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}
