package vmnet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/hoststate"
)

// ipForward is the daemon namespace's forwarding switch.
const ipForward = "/proc/sys/net/ipv4/ip_forward"

// hostEgress is what full egress changes in the daemon's network
// namespace, shared by every daemon there (package hoststate): forwarding
// on and the table inet thaw. Undo removes the table and puts forwarding
// back as the first daemon found it.
type hostEgress struct{}

func (hostEgress) Save() ([]byte, error) {
	b, err := os.ReadFile(ipForward)
	if err != nil {
		return nil, fmt.Errorf("read ip forwarding: %w", err)
	}
	v := bytes.TrimSpace(b)
	if _, err := parseForward(v); err != nil {
		return nil, err
	}
	return v, nil
}

func (hostEgress) Apply() error {
	if err := os.WriteFile(ipForward, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable ip forwarding: %w", err)
	}
	return nft(hostRules)
}

func (hostEgress) Undo(saved []byte) error {
	var errs []error
	// Declaring the table first makes the deletion succeed when it is gone.
	if err := nft("table inet thaw\ndelete table inet thaw\n"); err != nil {
		errs = append(errs, fmt.Errorf("remove table inet thaw: %w", err))
	}
	v, err := parseForward(saved)
	if err == nil {
		err = os.WriteFile(ipForward, []byte(v), 0o644)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("restore ip forwarding: %w", err))
	}
	return errors.Join(errs...)
}

// parseForward accepts what net.ipv4.ip_forward holds: 0 or 1.
func parseForward(b []byte) (string, error) {
	v := strings.TrimSpace(string(b))
	if v != "0" && v != "1" {
		return "", fmt.Errorf("ip forwarding value %q is neither 0 nor 1", v)
	}
	return v, nil
}

// egressKey names full egress's change in the calling thread's network
// namespace: its cookie, never reused while the host runs (Linux 5.14 and
// later), or else its inode.
func egressKey() (string, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("network namespace id: %w", err)
	}
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	unix.Close(fd)
	if err == nil {
		return fmt.Sprintf("egress-net-%d", cookie), nil
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", fmt.Errorf("network namespace id: %w", err)
	}
	return fmt.Sprintf("egress-netino-%d", st.Ino), nil
}

// holdEgress, when full egress is allowed, holds the host's change for
// this daemon; otherwise it undoes what a daemon that died left in this
// namespace, when no live daemon holds it.
func (h *Host) holdEgress() error {
	key, err := egressKey()
	if err != nil {
		return err
	}
	dir, err := hoststate.Open(hoststate.DefaultDir)
	if !h.cfg.AllowFullEgress {
		if err != nil {
			h.log.Warn("host state not checked for full egress a daemon left", "err", err)
			return nil
		}
		undone, err := dir.Recover(key, hostEgress{})
		switch {
		case err != nil:
			h.log.Warn("undo the full egress a daemon that exited left", "err", err)
		case undone:
			h.log.Warn("undid the full egress a daemon that exited left: table inet thaw removed, ip forwarding as it was")
		}
		return nil
	}
	if err != nil {
		return err
	}
	h.egress, err = dir.Acquire(key, hostEgress{})
	return err
}

// Close lets go of the host's full egress: the last daemon of the
// namespace to close removes the table and puts forwarding back. The VMs'
// networks must be closed first.
func (h *Host) Close() error {
	if h.egress == nil {
		return nil
	}
	err := h.egress.Release()
	h.egress = nil
	if err != nil {
		return fmt.Errorf("full egress: %w", err)
	}
	return nil
}

// RemoveLink removes VM vm's full-egress link from the daemon's namespace
// if it is there (the namespace end goes with it): what a daemon that
// died left, if something kept the VM's namespace alive. It reports
// whether there was one.
func RemoveLink(vm string) (bool, error) {
	l, err := netlink.LinkByName(linkName(vm))
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return false, nil
		}
		return false, fmt.Errorf("link %s: %w", linkName(vm), err)
	}
	if l.Type() != "veth" {
		return false, fmt.Errorf("link %s is a %s, not thaw's veth", linkName(vm), l.Type())
	}
	if err := netlink.LinkDel(l); err != nil {
		return false, fmt.Errorf("remove link %s: %w", linkName(vm), err)
	}
	return true, nil
}
