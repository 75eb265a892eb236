// Package cluster runs several thawd nodes on one host, each in a network
// namespace of its own joined to the host by a bridge, behind a real
// HAProxy that routes a function's invocations to one node by consistent
// hashing on its name and fails over when that node dies. Tests and
// `make cluster-demo` use it; on real hosts the same pieces are separate
// machines (docs/cluster.md).
package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// namePrefix starts every namespace this package makes; the rest of the
// name carries the creating process's id, so Sweep can tell leftovers of
// dead runs from namespaces in use.
const namePrefix = "thawc"

// runs counts the networks this process made.
var runs atomic.Uint32

// Network is a bridge on the host with one subnet, and a namespace per
// node with a veth into the bridge. The host's end (HostIP) is where the
// nodes reach services on the host.
type Network struct {
	ID     string       // unique per run: the creator's pid (hex) and a random byte
	Bridge string       // the host's bridge device
	Prefix netip.Prefix // a /24 no host interface uses
	HostIP netip.Addr   // the bridge's address, .1
	undo   []func() error
}

// NewNetwork creates the bridge on a free /24 of 10.200.0.0-10.249.255.0.
func NewNetwork() (*Network, error) {
	var rb [3]byte
	if _, err := rand.Read(rb[:]); err != nil {
		return nil, err
	}
	// The pid tells runs of different processes apart, the counter runs
	// of one process (from a random start).
	n := &Network{ID: fmt.Sprintf("%x%02x", os.Getpid(), byte(runs.Add(1))+rb[0])}
	n.Bridge = "thb" + n.ID
	prefix, err := freeSubnet(rb[1], rb[2])
	if err != nil {
		return nil, err
	}
	n.Prefix, n.HostIP = prefix, prefix.Addr().Next()
	if err := ip("link", "add", n.Bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	n.undo = append(n.undo, func() error { return ip("link", "del", n.Bridge) })
	for _, args := range [][]string{
		{"addr", "add", netip.PrefixFrom(n.HostIP, 24).String(), "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	} {
		if err := ip(args...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// freeSubnet picks a /24 in 10.200.0.0/16-10.249.0.0/16, starting from a
// random one, that no address of this host is in.
func freeSubnet(a, b byte) (netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, err
	}
	used := func(p netip.Prefix) bool {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(ipn.IP); ok && p.Contains(x.Unmap()) {
					return true
				}
			}
		}
		return false
	}
	for i := 0; i < 50*256; i++ {
		k := (int(a)%50*256 + int(b) + i) % (50 * 256)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + k/256), byte(k % 256), 0}), 24)
		if !used(p) {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("no free /24 in 10.200.0.0-10.249.255.0")
}

// Namespace is the name of node i's namespace (under /run/netns).
func (n *Network) Namespace(i int) string { return fmt.Sprintf("%s-%s-node-%d", namePrefix, n.ID, i) }

// NodeIP is node i's address (i from 1): .10+i.
func (n *Network) NodeIP(i int) netip.Addr {
	a := n.Prefix.Addr().As4()
	a[3] = byte(10 + i)
	return netip.AddrFrom4(a)
}

// veth is the host's end of node i's link.
func (n *Network) veth(i int) string { return fmt.Sprintf("thv%sn%d", n.ID, i) }

// AddNode creates node i's namespace: loopback, eth0 with NodeIP(i)/24 on
// a veth whose other end is in the bridge, and a default route to the
// host. Guests of the node's daemon get namespaces of their own below it
// (internal/vmnet), as on any host.
func (n *Network) AddNode(i int) (string, error) {
	if i < 1 || i > 200 {
		return "", fmt.Errorf("node %d: nodes are numbered 1 to 200", i)
	}
	return n.addNamespace(n.Namespace(i), n.veth(i), n.NodeIP(i))
}

// addNamespace creates namespace ns with eth0 at addr on a veth into the
// bridge and a default route to the host.
func (n *Network) addNamespace(ns, veth string, addr netip.Addr) (string, error) {
	if err := ip("netns", "add", ns); err != nil {
		return "", err
	}
	n.undo = append(n.undo, func() error { return ip("netns", "del", ns) })
	n.undo = append(n.undo, func() error { return ipIfExists(veth) })
	steps := [][]string{
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", veth, "master", n.Bridge},
		{"link", "set", veth, "up"},
		{"-n", ns, "addr", "add", netip.PrefixFrom(addr, 24).String(), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "route", "add", "default", "via", n.HostIP.String()},
	}
	for _, args := range steps {
		if err := ip(args...); err != nil {
			return "", err
		}
	}
	return ns, nil
}

// SetLink takes node i's link to the bridge down or up: a partition, as
// if its host's network failed (nothing answers, not even a reset).
func (n *Network) SetLink(i int, up bool) error {
	return setLink(n.veth(i), up)
}

func setLink(veth string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip("link", "set", veth, state)
}

// StoreNamespace is the object store's namespace.
func (n *Network) StoreNamespace() string { return fmt.Sprintf("%s-%s-store", namePrefix, n.ID) }

// StoreIP is the object store's address: .5.
func (n *Network) StoreIP() netip.Addr {
	a := n.Prefix.Addr().As4()
	a[3] = 5
	return netip.AddrFrom4(a)
}

// storeVeth is the host's end of the store's link.
func (n *Network) storeVeth() string { return fmt.Sprintf("thv%ss", n.ID) }

// AddStore creates the object store's namespace, joined to the bridge
// like a node's, at StoreIP.
func (n *Network) AddStore() (string, error) {
	return n.addNamespace(n.StoreNamespace(), n.storeVeth(), n.StoreIP())
}

// ShapeStoreLink sets the rate half of the emulated link between the
// nodes and the store: a token bucket on both ends of the store's veth
// (the host's end limits what the nodes send, the store's end what it
// answers). Every node reaches the store through it. The delay half is
// the store's delay line (delay.go).
func (n *Network) ShapeStoreLink(l Link) error {
	if err := l.Validate(); err != nil {
		return err
	}
	args := l.qdiscArgs()
	if err := tc(append([]string{"qdisc", "replace", "dev", n.storeVeth(), "root"}, args...)...); err != nil {
		return err
	}
	return tc(append([]string{"-n", n.StoreNamespace(), "qdisc", "replace", "dev", "eth0", "root"}, args...)...)
}

// Close removes the namespaces, veths and the bridge, last made first;
// it reports what it could not remove.
func (n *Network) Close() error {
	var errs []error
	for i := len(n.undo) - 1; i >= 0; i-- {
		errs = append(errs, n.undo[i]())
	}
	n.undo = nil
	return errors.Join(errs...)
}

// ipIfExists deletes a link unless it is already gone (a veth goes with
// its peer's namespace).
func ipIfExists(link string) error {
	if _, err := net.InterfaceByName(link); err != nil {
		return nil
	}
	return ip("link", "del", link)
}

func ip(args ...string) error { return run("ip", args...) }

func tc(args ...string) error { return run("tc", args...) }

func run(name string, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Sweep removes namespaces and bridges that runs of this package left
// behind when their process died without cleaning up (killed, say): those
// whose creator's pid is gone. It returns what it removed.
func Sweep() ([]string, error) {
	var removed []string
	var errs []error
	ents, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		id, ok := strings.CutPrefix(e.Name(), namePrefix+"-")
		if id, _, ok2 := strings.Cut(id, "-"); ok && ok2 && creatorGone(id) {
			if err := ip("netns", "del", e.Name()); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, e.Name())
			}
		}
	}
	links, err := net.Interfaces()
	if err != nil {
		return removed, errors.Join(append(errs, err)...)
	}
	for _, l := range links {
		if id, ok := strings.CutPrefix(l.Name, "thb"); ok && creatorGone(id) {
			if err := ip("link", "del", l.Name); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, l.Name)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// creatorGone: id is a Network.ID whose creating process has exited.
func creatorGone(id string) bool {
	if len(id) < 3 {
		return false
	}
	if _, err := hex.DecodeString(id[len(id)-2:]); err != nil {
		return false
	}
	pid, err := strconv.ParseInt(id[:len(id)-2], 16, 32)
	if err != nil || pid <= 0 {
		return false
	}
	_, err = os.Stat(filepath.Join("/proc", strconv.Itoa(int(pid))))
	return errors.Is(err, os.ErrNotExist)
}
