package vmnet

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/hoststate"
)

// ErrFullEgressOff: a function asks for full egress and the operator has
// not allowed it.
var ErrFullEgressOff = errors.New("full egress is not allowed on this daemon")

// HostConfig is the operator's choice.
type HostConfig struct {
	// AllowFullEgress lets functions declare full egress: the host then
	// forwards their traffic beyond it (net.ipv4.ip_forward=1, an
	// nftables table "thaw").
	AllowFullEgress bool
}

// Host builds VM networks on this host.
type Host struct {
	cfg       HostConfig
	log       *slog.Logger
	resolvers []netip.AddrPort
	egress    *hoststate.Lease // full egress's change to the host, while allowed
}

// NewHost checks that this process can build namespaces and, if full
// egress is allowed, prepares the host for it (Close undoes that);
// otherwise it undoes what a daemon that died left for full egress.
func NewHost(cfg HostConfig, log *slog.Logger) (*Host, error) {
	if err := canCreate(); err != nil {
		return nil, fmt.Errorf("guest networks: %w", err)
	}
	h := &Host{cfg: cfg, log: log}
	if err := h.holdEgress(); err != nil {
		return nil, fmt.Errorf("full egress: %w", err)
	}
	if cfg.AllowFullEgress {
		h.resolvers = readResolvers("/etc/resolv.conf")
		log.Warn("full egress allowed: functions that declare it reach beyond this host (ip forwarding on, nftables table inet thaw)",
			"resolvers", h.resolvers)
	}
	return h, nil
}

// CheckPolicy refuses what the host will not do.
func (h *Host) CheckPolicy(p Policy) error {
	if p.Egress == EgressFull && !h.cfg.AllowFullEgress {
		return fmt.Errorf("%w: start thawd with --allow-full-egress, or list the services the function needs", ErrFullEgressOff)
	}
	return nil
}

// Net is one VM's network.
type Net struct {
	ns     *namespace
	proxy  *proxy
	veth   string // full egress: the host end of the VM's link
	policy Policy
	// SetupTime is what building it took.
	SetupTime time.Duration
}

// Attach builds the network of VM vm under policy p (normalized).
func (h *Host) Attach(vm string, p Policy) (*Net, error) {
	if err := h.CheckPolicy(p); err != nil {
		return nil, err
	}
	t0 := time.Now()
	svcs := p.ServiceList()
	setup := nsSetup{dns: p.Egress == EgressFull}
	for _, s := range svcs {
		setup.listen = append(setup.listen, s.Guest)
		if s.Guest.Addr() != Gateway {
			setup.locals = append(setup.locals, s.Guest.Addr())
		}
	}
	ns, err := newNamespace(setup)
	if err != nil {
		return nil, fmt.Errorf("vm network: %w", err)
	}
	n := &Net{ns: ns, proxy: newProxy(h.log, vm), policy: p}
	for i, s := range svcs {
		if err := n.proxy.serve(ns.lns[i], s.Target); err != nil {
			n.Close()
			return nil, fmt.Errorf("vm network: service %s: %w", s.Target, err)
		}
	}
	if p.Egress == EgressFull {
		if n.veth, err = attachEgress(ns.ns, vm); err != nil {
			n.Close()
			return nil, fmt.Errorf("vm network: full egress: %w", err)
		}
		if err := n.proxy.relayDNS(ns.dns, h.resolvers); err != nil {
			n.Close()
			return nil, fmt.Errorf("vm network: dns: %w", err)
		}
	}
	n.SetupTime = time.Since(t0)
	return n, nil
}

// Tap is the tap device for the VMM; the Net keeps its own descriptor.
func (n *Net) Tap() *os.File { return n.ns.tap }

// Close tears the network down: listeners and connections close, and the
// namespace (with its tap and link) goes once the VMM has exited too.
func (n *Net) Close() error {
	n.proxy.close()
	n.ns.close()
	if n.veth != "" {
		detachEgress(n.veth)
	}
	return nil
}

// Connections reports the service connections accepted and refused (over
// MaxConns).
func (n *Net) Connections() (accepted, refused int) {
	n.proxy.mu.Lock()
	defer n.proxy.mu.Unlock()
	return n.proxy.accepted, n.proxy.refused
}

// readResolvers lists the nameservers of resolv.conf (port 53).
func readResolvers(path string) []netip.AddrPort {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil && a.Is4() {
				out = append(out, netip.AddrPortFrom(a, 53))
			}
		}
	}
	return out
}
