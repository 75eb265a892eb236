package vmnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TapName is the tap device's name inside every VM's namespace.
const TapName = "tap0"

// nsSetup is what a new namespace is given besides its tap device.
type nsSetup struct {
	locals []netip.Addr     // extra local addresses (services reached at their own address)
	listen []netip.AddrPort // TCP listeners, for allowed services
	dns    bool             // a UDP listener on DNS:53
}

// namespace is a VM's network namespace: nothing lives in it but the tap
// device and the daemon's listeners. It exists while any of these
// descriptors is open.
type namespace struct {
	ns    *os.File   // the namespace itself
	tap   *os.File   // the tap device, for QEMU
	lns   []*os.File // listening sockets, in the order of nsSetup.listen
	dns   *os.File   // the DNS socket, if asked for
	owned []*os.File
}

func (n *namespace) close() {
	for _, f := range n.owned {
		f.Close()
	}
	n.owned = nil
}

// newNamespace builds a namespace on a locked thread that unshares its
// network namespace, builds it and returns to the daemon's namespace.
func newNamespace(setup nsSetup) (*namespace, error) {
	n := &namespace{}
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("new network namespace: %w", err)
		}
		return n.build(setup)
	})
	if err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// onThread runs fn on a locked OS thread and puts the thread back in the
// daemon's network namespace afterwards. The thread must outlive fn: a
// process forked from a thread gets its parent-death signal when that
// thread exits, so letting it die would kill VMMs started from it. If the
// thread cannot go back, it stays locked and parked forever instead.
func onThread(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("network namespace: %w", err)
			return
		}
		defer home.Close()
		ch <- fn()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			select {} // never reused in the wrong namespace, never exits
		}
		runtime.UnlockOSThread()
	}()
	return <-ch
}

func (n *namespace) keep(f *os.File) *os.File {
	n.owned = append(n.owned, f)
	return f
}

func (n *namespace) build(setup nsSetup) error {
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	n.ns = n.keep(ns)
	// No IPv6: nothing in the namespace speaks it.
	for _, p := range []string{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"} {
		_ = os.WriteFile(p, []byte("1"), 0o644)
	}
	if n.tap, err = openTap(TapName); err != nil {
		return err
	}
	n.keep(n.tap)
	tap, err := netlink.LinkByName(TapName)
	if err != nil {
		return fmt.Errorf("tap: %w", err)
	}
	mac, _ := net.ParseMAC(GatewayMAC)
	if err := netlink.LinkSetHardwareAddr(tap, mac); err != nil {
		return fmt.Errorf("tap address: %w", err)
	}
	addrs := []*netlink.Addr{
		{IPNet: &net.IPNet{IP: Gateway.AsSlice(), Mask: net.CIDRMask(24, 32)}},
		{IPNet: &net.IPNet{IP: DNS.AsSlice(), Mask: net.CIDRMask(24, 32)}},
	}
	for _, a := range setup.locals {
		addrs = append(addrs, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}})
	}
	for _, a := range addrs {
		if err := netlink.AddrAdd(tap, a); err != nil {
			return fmt.Errorf("address %s: %w", a.IPNet, err)
		}
	}
	for _, l := range []netlink.Link{tap, &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "lo"}}} {
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("link %s up: %w", l.Attrs().Name, err)
		}
	}
	// A guest's packet for anywhere else meets a route that is unreachable
	// and gets an ICMP error back at once (only a namespace that forwards
	// answers with one), so its connect fails fast instead of timing out.
	// Full egress replaces this route with one to the host.
	// The errors go to this namespace's one guest only: no rate limit.
	for path, v := range map[string]string{"/proc/sys/net/ipv4/ip_forward": "1", "/proc/sys/net/ipv4/icmp_ratelimit": "0"} {
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			return fmt.Errorf("namespace %s: %w", filepath.Base(path), err)
		}
	}
	if err := netlink.RouteAdd(&netlink.Route{Type: unix.RTN_UNREACHABLE, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}); err != nil {
		return fmt.Errorf("unreachable route: %w", err)
	}
	for _, ap := range setup.listen {
		f, err := bindSocket(unix.SOCK_STREAM, ap)
		if err != nil {
			return err
		}
		n.lns = append(n.lns, n.keep(f))
	}
	if setup.dns {
		f, err := bindSocket(unix.SOCK_DGRAM, netip.AddrPortFrom(DNS, 53))
		if err != nil {
			return err
		}
		n.dns = n.keep(f)
	}
	return nil
}

// openTap creates a tap device (no packet info, with virtio-net headers,
// as QEMU's tap backend wants them).
func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tap: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap: TUNSETIFF: %w", err)
	}
	return os.NewFile(uintptr(fd), "tap:"+name), nil
}

// bindSocket makes a socket of typ bound to ap (listening, for streams) in
// the calling thread's namespace.
func bindSocket(typ int, ap netip.AddrPort) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", ap, err)
	}
	if typ == unix.SOCK_STREAM {
		if err := unix.Listen(fd, 64); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("listen %s: %w", ap, err)
		}
	}
	return os.NewFile(uintptr(fd), ap.String()), nil
}

// inNamespace runs fn on a thread that has entered ns.
func inNamespace(ns *os.File, fn func() error) error {
	return onThread(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter network namespace: %w", err)
		}
		return fn()
	})
}

// canCreate says why this process cannot build namespaces, if it cannot.
func canCreate() error {
	n, err := newNamespace(nsSetup{})
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w (needs CAP_SYS_ADMIN and CAP_NET_ADMIN)", err)
		}
		return err
	}
	n.close()
	return nil
}
