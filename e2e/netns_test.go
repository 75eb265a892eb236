package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/tcptest"
)

// connectProbe connects to every address given and reports, with who ran
// it: uid, supplementary groups and effective capabilities.
const connectProbe = `
import json, socket, sys
st = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
out = {"uid": st["Uid"].split()[0], "groups": st["Groups"].strip(), "capeff": st["CapEff"].strip(), "results": {}}
for a in sys.argv[1:]:
    host, port = a.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        out["results"][a] = "connected"
    except OSError as e:
        out["results"][a] = e.strerror or str(e)
print(json.dumps(out))
`

type probeResult struct {
	UID     string            `json:"uid"`
	Groups  string            `json:"groups"`
	CapEff  string            `json:"capeff"`
	Results map[string]string `json:"results"`
}

// probePython is the system's python3: one any user may run (a user's
// own interpreter, under root's home, is not).
const probePython = "/usr/bin/python3"

// probeAs runs connectProbe as uid with no groups and no capabilities, in
// the network namespace of process pid, or in the test's own if pid is 0.
func probeAs(t *testing.T, pid int, uid uint32, addrs ...string) probeResult {
	t.Helper()
	var out []byte
	var err error
	if pid == 0 {
		out, err = asUser(uid, probePython, append([]string{"-c", connectProbe}, addrs...)...)
	} else {
		id := strconv.FormatUint(uint64(uid), 10)
		args := append([]string{"--net=/proc/" + strconv.Itoa(pid) + "/ns/net", "--setuid", id, "--setgid", id, "--",
			probePython, "-c", connectProbe}, addrs...)
		out, err = exec.Command("nsenter", args...).CombinedOutput()
	}
	if err != nil {
		t.Fatalf("probe (pid %d): %v %s", pid, err, out)
	}
	var r probeResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	if r.UID != strconv.FormatUint(uint64(uid), 10) || r.Groups != "" || r.CapEff != "0000000000000000" {
		t.Fatalf("probe ran as uid %s, groups %q, capabilities %s: want uid %d, none, none", r.UID, r.Groups, r.CapEff, uid)
	}
	return r
}

// TestQEMUNetworkNamespace: code running as a VM's QEMU user, without
// groups or capabilities, in QEMU's network namespace, reaches neither a
// loopback service of the host nor the daemon's API, though the same
// probe from the host's namespace reaches both. Every QEMU (a booted VM,
// a restored one, a standby VM of the VMM pool) has a namespace of its
// own with nothing but a loopback, and the guests still reach what they
// may (TestGuestNetworkIsolation, TestGuestFullEgress).
func TestQEMUNetworkNamespace(t *testing.T) {
	parallel(t)
	ctx := ctxT(t)
	e, boot, snap := hostileEnv(t, t.TempDir(), nil)
	c := e.c
	clone := restoreVM(t, c, snap.ID, "vanilla")
	var standby *client.VM
	for deadline := time.Now().Add(3 * time.Minute); standby == nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no standby vm within 3 minutes of the restore")
		}
		vms, err := c.ListVMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vms {
			if v.State == "standby" && v.PID > 0 {
				standby = &vms[i]
			}
		}
	}
	service := tcptest.Serve(t, func(c net.Conn, _ int) { c.Close() })
	api, err := url.Parse(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	targets := []string{fmt.Sprintf("127.0.0.1:%d", service.Port), api.Host}

	mine, _ := os.Readlink("/proc/self/ns/net")
	seen := map[string]string{}
	for _, vm := range []*client.VM{boot, clone, standby} {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", vm.PID))
		if err != nil {
			t.Fatal(err)
		}
		if ns == mine {
			t.Errorf("vm %s (%s): qemu runs in the host's network namespace", vm.ID, vm.State)
		}
		if other, dup := seen[ns]; dup {
			t.Errorf("vms %s and %s share network namespace %s", other, vm.ID, ns)
		}
		seen[ns] = vm.ID
		dev, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", vm.PID))
		if err != nil {
			t.Fatal(err)
		}
		if ifs := strings.Count(string(dev), ":"); ifs != 1 || !strings.Contains(string(dev), "lo:") {
			t.Errorf("vm %s: qemu's namespace has interfaces other than lo:\n%s", vm.ID, dev)
		}
		uid, _ := strconv.ParseUint(strings.Fields(procStatus(t, vm.PID)["Uid"])[0], 10, 32)
		inside := probeAs(t, vm.PID, uint32(uid), targets...)
		for _, a := range targets {
			if inside.Results[a] == "connected" {
				t.Errorf("vm %s (%s): qemu's user in qemu's namespace reached %s", vm.ID, vm.State, a)
			}
		}
		t.Logf("vm %s (%s), uid %d, in qemu's namespace: %v", vm.ID, vm.State, uid, inside.Results)
		// The same probe from the host's namespace reaches both: what
		// QEMU could do before it had a namespace of its own.
		outside := probeAs(t, 0, uint32(uid), targets...)
		for _, a := range targets {
			if outside.Results[a] != "connected" {
				t.Errorf("from the host's namespace uid %d did not reach %s: %s (the probe proves nothing)", uid, a, outside.Results[a])
			}
		}
	}
	// The guests still work: a clone answers.
	if inv, err := c.InvokeVM(ctx, clone.ID, ev(`{}`), client.InvokeOptions{}); err != nil || !inv.OK {
		t.Fatalf("invoke the clone: %v %+v", err, inv)
	}
}
