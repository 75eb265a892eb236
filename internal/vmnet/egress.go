package vmnet

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/vishvananda/netlink"
)

// Full egress: the VM's namespace gets a veth link to the host; the
// namespace masquerades its guest (every clone is 10.0.2.15) to an address
// of its own, 10.201.0.0/16 plus the host end's interface index (unique
// on the host, so no allocator is needed); the host routes that address to
// the link, masquerades it to the outside, and refuses whatever comes in
// on a VM link for the host itself or for another VM.
const (
	egressNet  = "10.201.0.0/16"
	hostLinkIP = "169.254.1.1" // the host end of every VM link (link-local, the same on all)
	vethPrefix = "thv"
	nsLink     = "eth1"
)

// hostRules is the host's nftables table for full egress.
const hostRules = `table inet thaw
delete table inet thaw
table inet thaw {
	chain input {
		type filter hook input priority filter - 10; policy accept;
		iifname "thv*" drop
	}
	chain forward {
		type filter hook forward priority filter - 10; policy accept;
		iifname "thv*" oifname "thv*" drop
		iifname "thv*" accept
		oifname "thv*" ct state established,related accept
		oifname "thv*" drop
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr 10.201.0.0/16 oifname != "thv*" masquerade
	}
}
`

// nsRules masquerades the guest to the namespace's own address.
const nsRules = `table ip thaw {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "eth1" masquerade
	}
}
`

func nft(rules string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// egressAddr is the namespace's address for the host link with index idx.
func egressAddr(idx int) (netip.Addr, error) {
	if idx <= 0 || idx >= 1<<16 {
		return netip.Addr{}, fmt.Errorf("interface index %d does not fit %s", idx, egressNet)
	}
	return netip.AddrFrom4([4]byte{10, 201, byte(idx >> 8), byte(idx)}), nil
}

// attachEgress links the namespace ns to the host and returns the host
// end's name.
func attachEgress(ns *os.File, vm string) (string, error) {
	name := linkName(vm)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: nsLink, PeerNamespace: netlink.NsFd(int(ns.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		return "", fmt.Errorf("veth %s: %w", name, err)
	}
	fail := func(err error) (string, error) {
		detachEgress(name)
		return "", err
	}
	host, err := netlink.LinkByName(name)
	if err != nil {
		return fail(err)
	}
	addr, err := egressAddr(host.Attrs().Index)
	if err != nil {
		return fail(err)
	}
	gw := net.ParseIP(hostLinkIP)
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}}); err != nil {
		return fail(fmt.Errorf("host link address: %w", err))
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fail(err)
	}
	dst := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
		return fail(fmt.Errorf("host route: %w", err))
	}
	err = inNamespace(ns, func() error {
		link, err := netlink.LinkByName(nsLink)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: dst}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		gwNet := &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: gwNet, Scope: netlink.SCOPE_LINK}); err != nil {
			return err
		}
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}); err != nil {
			return err
		}
		return nft(nsRules) // runs in this thread's namespace, which the child inherits
	})
	if err != nil {
		return fail(fmt.Errorf("namespace link: %w", err))
	}
	return name, nil
}

// linkName is the host end of VM vm's link (at most 15 bytes, the
// kernel's limit).
func linkName(vm string) string {
	name := vethPrefix + strings.TrimPrefix(vm, "vm-")
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// detachEgress removes the host end (the namespace end goes with it).
func detachEgress(name string) {
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
}
