package vmnet

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// privateNetns moves the calling test's goroutine onto a thread of its
// own in a new network namespace, so a test can change the "host"
// namespace (forwarding, nftables) without touching the real one. The
// thread stays locked: it ends with the test.
func privateNetns(t *testing.T) {
	t.Helper()
	root(t)
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	if err := exec.Command("ip", "link", "set", "lo", "up").Run(); err != nil {
		t.Fatalf("lo up: %v", err)
	}
}

func forwarding(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(ipForward)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func hasThawTable(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v %s", err, out)
	}
	return strings.Contains(string(out), "table inet thaw\n")
}

// Full egress changes the daemon's namespace while any daemon there
// allows it; when the last one closes, the table is gone and forwarding
// is what it was before the first (0 and 1 alike). A daemon that does not
// allow full egress changes nothing.
func TestHostEgressUndoneByLastDaemon(t *testing.T) {
	for _, orig := range []string{"0", "1"} {
		t.Run("forwarding="+orig, func(t *testing.T) {
			privateNetns(t)
			if err := os.WriteFile(ipForward, []byte(orig), 0o644); err != nil {
				t.Fatal(err)
			}
			off, err := NewHost(HostConfig{}, discard)
			if err != nil {
				t.Fatal(err)
			}
			if forwarding(t) != orig || hasThawTable(t) {
				t.Fatalf("a daemon without full egress changed the host: forwarding %s, table %v", forwarding(t), hasThawTable(t))
			}
			a, err := NewHost(HostConfig{AllowFullEgress: true}, discard)
			if err != nil {
				t.Fatal(err)
			}
			b, err := NewHost(HostConfig{AllowFullEgress: true}, discard)
			if err != nil {
				t.Fatal(err)
			}
			if forwarding(t) != "1" || !hasThawTable(t) {
				t.Fatalf("full egress allowed: forwarding %s, table %v", forwarding(t), hasThawTable(t))
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := off.Close(); err != nil {
				t.Fatal(err)
			}
			if forwarding(t) != "1" || !hasThawTable(t) {
				t.Fatalf("undone while a daemon still allows full egress: forwarding %s, table %v", forwarding(t), hasThawTable(t))
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if forwarding(t) != orig || hasThawTable(t) {
				t.Fatalf("after the last daemon: forwarding %s (want %s), table %v", forwarding(t), orig, hasThawTable(t))
			}
			if err := b.Close(); err != nil {
				t.Fatalf("a second close: %v", err)
			}
		})
	}
}

// Undo works on a change made in part (the table never installed) and on
// none at all, and refuses a saved value that is not a forwarding value.
func TestHostEgressUndoPartial(t *testing.T) {
	privateNetns(t)
	if err := os.WriteFile(ipForward, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (hostEgress{}).Undo([]byte("0\n")); err != nil {
		t.Fatal(err)
	}
	if forwarding(t) != "0" || hasThawTable(t) {
		t.Fatalf("forwarding %s, table %v", forwarding(t), hasThawTable(t))
	}
	if err := (hostEgress{}).Undo([]byte("yes")); err == nil || !strings.Contains(err.Error(), "neither 0 nor 1") {
		t.Fatalf("undo to a malformed value: %v", err)
	}
	if forwarding(t) != "0" {
		t.Fatalf("a malformed value changed forwarding to %s", forwarding(t))
	}
}

// Each network namespace has its own key, the same for every call in it.
func TestEgressKeyPerNamespace(t *testing.T) {
	root(t)
	host, err := egressKey()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := egressKey(); again != host {
		t.Fatalf("keys %s and %s in one namespace", host, again)
	}
	var inner string
	err = onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return err
		}
		var kerr error
		inner, kerr = egressKey()
		return kerr
	})
	if err != nil {
		t.Fatal(err)
	}
	if inner == host || !strings.HasPrefix(inner, "egress-net") {
		t.Fatalf("keys: host %s, new namespace %s", host, inner)
	}
}
