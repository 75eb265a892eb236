// Package vmnet gives every VM a network of its own: a tap device in a new
// network namespace that holds nothing but what the function's egress
// policy allows. By default a guest reaches nothing on the host and
// nothing beyond it; allowed services are proxied by the daemon; full
// egress (an operator's choice) routes the namespace to the outside
// through the host, never to the host itself.
package vmnet

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The guest's view, the same in every VM and in every snapshot: the guest
// agent configures eth0 as GuestIP/24 with Gateway as its default route.
var (
	GuestIP = netip.MustParseAddr("10.0.2.15")
	Gateway = netip.MustParseAddr("10.0.2.2") // the host's services, as the guest sees them
	DNS     = netip.MustParseAddr("10.0.2.3") // the resolver of full-egress guests
	subnet  = netip.MustParsePrefix("10.0.2.0/24")
)

// GatewayMAC is the tap's address, fixed so a guest restored from a
// snapshot finds its ARP entry for Gateway still true.
const GatewayMAC = "52:55:0a:00:02:02"

// Egress is what a function's guests may reach.
type Egress string

const (
	EgressNone     Egress = "none"     // nothing (the default)
	EgressServices Egress = "services" // only the listed host:port services
	EgressFull     Egress = "full"     // anything beyond the host (operators must allow it)
)

// MaxServices bounds a policy's service list.
const MaxServices = 16

// ErrInvalid: a policy that cannot be applied.
var ErrInvalid = errors.New("invalid network policy")

// Policy is a function's egress policy, as the API and catalog carry it.
type Policy struct {
	Egress   Egress   `json:"egress"`
	Services []string `json:"services,omitempty"`
}

// Service is one allowed service: where the daemon connects, and the
// address the guest connects to.
type Service struct {
	Target netip.AddrPort // on the host's network
	Guest  netip.AddrPort // inside the VM's network
}

// Normalize validates p and fills its defaults: no egress given means
// "services" when services are listed, else "none".
func (p Policy) Normalize() (Policy, error) {
	if p.Egress == "" {
		p.Egress = EgressNone
		if len(p.Services) > 0 {
			p.Egress = EgressServices
		}
	}
	switch p.Egress {
	case EgressNone, EgressFull:
		if len(p.Services) > 0 {
			return p, fmt.Errorf("%w: services are listed with egress %q; use egress \"services\"", ErrInvalid, p.Egress)
		}
	case EgressServices:
		if len(p.Services) == 0 {
			return p, fmt.Errorf("%w: egress \"services\" lists no service", ErrInvalid)
		}
	default:
		return p, fmt.Errorf("%w: egress %q is not none, services or full", ErrInvalid, p.Egress)
	}
	if len(p.Services) > MaxServices {
		return p, fmt.Errorf("%w: %d services, at most %d", ErrInvalid, len(p.Services), MaxServices)
	}
	seen := map[netip.AddrPort]bool{}
	for _, s := range p.Services {
		svc, err := ParseService(s)
		if err != nil {
			return p, err
		}
		if seen[svc.Guest] {
			return p, fmt.Errorf("%w: %s is listed twice (as the guest sees it: %s)", ErrInvalid, s, svc.Guest)
		}
		seen[svc.Guest] = true
	}
	return p, nil
}

// ServiceList parses a normalized policy's services.
func (p Policy) ServiceList() []Service {
	var out []Service
	for _, s := range p.Services {
		if svc, err := ParseService(s); err == nil {
			out = append(out, svc)
		}
	}
	return out
}

// ParseService reads "host:port". A loopback host (127.0.0.0/8,
// localhost) is a service on the daemon's host, which guests reach at the
// gateway (10.0.2.2:port, what thaw's functions have always used); any
// other IPv4 address is reached at that same address. Names are refused:
// guests have no resolver for them.
func ParseService(s string) (Service, error) {
	host, port, ok := strings.Cut(s, ":")
	if !ok || strings.Contains(port, ":") {
		return Service{}, fmt.Errorf("%w: service %q is not host:port (IPv4)", ErrInvalid, s)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return Service{}, fmt.Errorf("%w: service %q: port must be 1-65535", ErrInvalid, s)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || !addr.Is4() {
		return Service{}, fmt.Errorf("%w: service %q: name services by IPv4 address (guests have no resolver), or localhost", ErrInvalid, s)
	}
	target := netip.AddrPortFrom(addr, uint16(n))
	switch {
	case addr.IsLoopback():
		return Service{Target: target, Guest: netip.AddrPortFrom(Gateway, uint16(n))}, nil
	case subnet.Contains(addr):
		return Service{}, fmt.Errorf("%w: service %q is inside the guest's own network %s", ErrInvalid, s, subnet)
	case addr.IsUnspecified() || addr.IsMulticast() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return Service{}, fmt.Errorf("%w: service %q is not a host address", ErrInvalid, s)
	}
	return Service{Target: target, Guest: target}, nil
}
