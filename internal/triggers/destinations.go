package triggers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// Destinations receive asynchronous invocations' outcomes: the
// dead-letter subject, or a webhook (a POST of the outcome) that the
// daemon's egress rules allow.

// DestinationDLQ is the dead-letter subject as a destination.
const DestinationDLQ = "dlq"

type destinations struct {
	e      *engine
	m      *metricSet
	log    *slog.Logger
	allow  map[string]bool // host:port allowed whatever their address
	public bool            // public addresses allowed
	client *http.Client
}

func newDestinations(cfg Config, e *engine, m *metricSet, log *slog.Logger) *destinations {
	d := &destinations{e: e, m: m, log: log, allow: map[string]bool{}, public: cfg.AllowPublicDestinations}
	for _, a := range cfg.DestinationAllow {
		hp, _ := parseHostPort(a)
		d.allow[hp] = true
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, ControlContext: d.control}
	d.client = &http.Client{Timeout: 10 * time.Second,
		Transport:     &http.Transport{DialContext: dialer.DialContext, Proxy: nil, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return d
}

// parseHostPort normalizes host:port (a port is required).
func parseHostPort(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return "", errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", errors.New("port must be 1 to 65535")
	}
	return net.JoinHostPort(strings.ToLower(host), port), nil
}

// webhookTarget is a webhook URL's host:port, checked.
func webhookTarget(dest string) (*url.URL, string, error) {
	u, err := url.Parse(dest)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, "", fmt.Errorf("destination %q: use dlq or an http(s) URL without credentials", truncate(dest, 100))
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	hp, err := parseHostPort(net.JoinHostPort(u.Hostname(), port))
	return u, hp, err
}

// check says whether a destination is one thaw may deliver to.
func (d *destinations) check(dest string) error {
	if dest == "" || dest == DestinationDLQ {
		return nil
	}
	_, hp, err := webhookTarget(dest)
	if err != nil {
		return err
	}
	if d.allow[hp] {
		return nil
	}
	if !d.public {
		return fmt.Errorf("destination %s: %s is not in thawd's --destination-allow, and public webhooks need --allow-public-destinations", redactURL(dest), hp)
	}
	if ip, err := netip.ParseAddr(strings.Trim(strings.Split(hp, "]:")[0], "[")); err == nil && !publicAddr(ip) {
		return fmt.Errorf("destination %s: %s is not a public address; allow it by --destination-allow", redactURL(dest), ip)
	}
	return nil
}

// control refuses, at dial time, an address the rules do not allow (a
// name resolving to loopback, say), whatever the URL said.
func (d *destinations) control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	if ctx.Value(allowedNameKey{}) != nil {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("destination address %s: %w", address, err)
	}
	if d.allow[net.JoinHostPort(ap.Addr().Unmap().String(), strconv.Itoa(int(ap.Port())))] {
		return nil
	}
	if d.public && publicAddr(ap.Addr()) {
		return nil
	}
	return fmt.Errorf("%w: destination address %s is not allowed", daemon.ErrForbidden, address)
}

func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsGlobalUnicast() && !ip.IsPrivate() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast()
}

// allowedByName: a webhook whose URL names an allowed host:port may dial
// whatever that name resolves to.
func (d *destinations) allowedByName(hp string) bool { return d.allow[hp] }

// allowedNameKey marks a delivery's context whose URL names an allowed
// host:port.
type allowedNameKey struct{}

// deliver sends an outcome to dest ("" is none).
func (d *destinations) deliver(ctx context.Context, dest string, out *wire.Outcome) error {
	switch dest {
	case "":
		return nil
	case DestinationDLQ:
		return d.deadLetter(ctx, out)
	}
	err := d.webhook(ctx, dest, out)
	result := "ok"
	if err != nil {
		result = "failed"
	}
	d.m.destination("webhook", result)
	return err
}

// deadLetter stores an outcome on the function's dead-letter subject.
func (d *destinations) deadLetter(ctx context.Context, out *wire.Outcome) error {
	fn, _, _ := strings.Cut(out.Function, ":")
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(dlqSubject + fn)
	msg.Data = b
	msg.Header.Set(hdrID, out.ID)
	// A redelivered invocation's repeat of this outcome is dropped.
	msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s.%s.%d", out.ID, out.Condition, out.Attempts))
	if _, err := d.e.js.PublishMsg(context.WithoutCancel(ctx), msg); err != nil {
		d.m.destination("dlq", "failed")
		return fmt.Errorf("%w: dead letter: %v", ErrEngine, err)
	}
	d.m.destination("dlq", "ok")
	d.m.deadLetter(fn)
	return nil
}

// webhook POSTs the outcome, up to three times; any 2xx is delivered.
func (d *destinations) webhook(ctx context.Context, dest string, out *wire.Outcome) error {
	u, hp, err := webhookTarget(dest)
	if err != nil {
		return err
	}
	if !d.allowedByName(hp) && !d.public {
		return fmt.Errorf("%w: destination %s is no longer allowed", daemon.ErrForbidden, hp)
	}
	body, err := json.Marshal(out)
	if err != nil {
		return err
	}
	dctx := context.WithoutCancel(ctx)
	if d.allowedByName(hp) {
		dctx = context.WithValue(dctx, allowedNameKey{}, true)
	}
	var last error
	for try := range 3 {
		if try > 0 {
			sleep(ctx, time.Duration(try)*500*time.Millisecond)
		}
		req, err := http.NewRequestWithContext(dctx, http.MethodPost, u.String(), bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "thawd")
		req.Header.Set("X-Thaw-Async-Id", out.ID)
		req.Header.Set("X-Thaw-Condition", out.Condition)
		resp, err := d.client.Do(req)
		if err != nil {
			last = err
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return nil
		}
		last = fmt.Errorf("webhook answered %s", resp.Status)
	}
	return last
}

// redactURL is a URL fit for logs: scheme, host and path only.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return truncate(s, 40)
	}
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}
