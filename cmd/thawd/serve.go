package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/telemetry"
	"github.com/thaw-dev/thaw/internal/triggers"
)

// defaultSocket is where thawd listens when no --listen is given (the
// client's default URL is unix: this path).
const defaultSocket = "/run/thaw/thawd.sock"

// serveConfig is thawd's command line.
type serveConfig struct {
	Daemon         daemon.Config
	Listen         []string // --listen values; none: defaultSocket
	SocketGroup    string   // group of the Unix sockets; "": root's group
	TokenFile      string   // "": <data-dir>/token, generated at first start
	TLSCert        string
	TLSKey         string
	AllowedHosts   []string
	AllowedOrigins []string
	// MetricsListen, if set, is a loopback host:port serving /metrics
	// alone, without the token (for a Prometheus on this host).
	MetricsListen string
	// NodeName names the daemon in answers (Thaw-Node); "": the host name.
	NodeName string
	// DrainDelay is how long health answers draining before the
	// listeners close.
	DrainDelay time.Duration
	// Triggers: the functions listener, asynchronous invocations and
	// schedules (triggers.go).
	Triggers triggerSettings
}

// plan is what the command line asks for, checked before anything is
// opened: the addresses, the socket group, TLS, and whether TCP (and so
// the token) is used.
type plan struct {
	addrs   []api.Addr
	gid     int
	tls     *tls.Config
	tcp     bool
	token   string // from --token-file; else read or generated after Open
	metrics *api.Addr
}

// check validates the command line: listen addresses, TLS (required off
// loopback, and both files or neither), the socket group and the token
// file. Nothing is created.
func check(cfg serveConfig) (*plan, error) {
	p := &plan{}
	listen := cfg.Listen
	if len(listen) == 0 {
		listen = []string{defaultSocket}
	}
	var errs []error
	for _, s := range listen {
		a, err := api.ParseAddr(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if a.Network == "tcp" {
			p.tcp = true
			if !a.Loopback() && (cfg.TLSCert == "" || cfg.TLSKey == "") {
				errs = append(errs, fmt.Errorf("listen %s: not a loopback address, so it needs TLS: give --tls-cert and --tls-key", s))
			}
		}
		p.addrs = append(p.addrs, a)
	}
	if cfg.MetricsListen != "" {
		a, err := api.ParseAddr(cfg.MetricsListen)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--metrics-listen: %w", err))
		case a.Network != "tcp" || !a.Loopback():
			errs = append(errs, fmt.Errorf("--metrics-listen %s: metrics are served without the token on loopback only; scrape /metrics over --listen with the token from elsewhere", cfg.MetricsListen))
		default:
			p.metrics = &a
		}
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	} else if cfg.TLSCert != "" {
		var err error
		if p.tls, err = api.LoadTLS(cfg.TLSCert, cfg.TLSKey); err != nil {
			errs = append(errs, err)
		}
	}
	for _, o := range cfg.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("--allowed-origin %q: want scheme://host[:port], as a browser sends it", o))
		}
	}
	for _, h := range cfg.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/@ ") {
			errs = append(errs, fmt.Errorf("--allowed-host %q: want a host name or address, with an optional :port", h))
		}
	}
	var err error
	if p.gid, err = lookupGroup(cfg.SocketGroup); err != nil {
		errs = append(errs, err)
	}
	if cfg.TokenFile != "" {
		if p.token, err = api.ReadTokenFile(cfg.TokenFile); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.NodeName != "" && !api.ValidNodeName(cfg.NodeName) {
		errs = append(errs, fmt.Errorf("--node-name %q: want 1-63 letters, digits, '.', '_' or '-' (it goes into an HTTP header)", cfg.NodeName))
	}
	if cfg.DrainDelay < 0 {
		errs = append(errs, fmt.Errorf("--drain-delay %s: must not be negative", cfg.DrainDelay))
	}
	_, terrs := checkTriggers(cfg.Triggers)
	errs = append(errs, terrs...)
	return p, errors.Join(errs...)
}

// nodeName is --node-name, else the host name (if it is a valid one).
func nodeName(cfg serveConfig) string {
	if cfg.NodeName != "" {
		return cfg.NodeName
	}
	if h, err := os.Hostname(); err == nil && api.ValidNodeName(h) {
		return h
	}
	return ""
}

// lookupGroup resolves --socket-group (a name or a number); "" is root's
// primary group.
func lookupGroup(name string) (int, error) {
	if name == "" {
		root, err := user.LookupId("0")
		if err != nil {
			return 0, nil // no user database: root's group is 0
		}
		return strconv.Atoi(root.Gid)
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			g, err = user.LookupGroupId(name)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("--socket-group %q: %w", name, err)
	}
	return strconv.Atoi(g.Gid)
}

// serve runs thawd until ctx ends: check the command line, open the daemon
// (which locks its data directory), read or create the token, listen on
// every address, serve health alone (503 starting) while the daemon
// starts, then serve everything. ready, if set, is called with the
// listeners' addresses once requests are served. Stopping drains
// (--drain-delay), closes every listener, then the daemon.
func serve(ctx context.Context, cfg serveConfig, log *slog.Logger, ready func([]net.Addr)) error {
	p, err := check(cfg)
	if err != nil {
		return err
	}
	if cfg.Daemon.StoreDir == "" {
		cfg.Daemon.StoreDir = store.DefaultDirFor(cfg.Daemon.DataDir)
	}
	cfg.Daemon.TrustedGroup = cfg.SocketGroup
	tracing, err := telemetry.Setup(ctx, log) // OTEL_* from the environment; nil: no tracing
	if err != nil {
		return err
	}
	defer flushSpans(tracing, log)
	cfg.Daemon.TracerProvider = tracing.Provider()
	svc, err := daemon.Open(ctx, cfg.Daemon, log)
	if err != nil {
		return err
	}
	lns, ml, err := listenAll(cfg, p, log)
	if err != nil {
		return errors.Join(err, svc.Close(context.Background()))
	}
	if ml != nil {
		defer ml.Close()
	}
	trig, err := openTriggers(ctx, cfg, svc, p.token, log)
	if err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		return errors.Join(err, svc.Close(context.Background()))
	}
	// Requests are served from here on; until the daemon has started, only
	// GET /v1/health (503 starting).
	h := api.New(svc, log, api.Options{Token: p.token, AllowedHosts: cfg.AllowedHosts, AllowedOrigins: cfg.AllowedOrigins,
		NodeName: nodeName(cfg), TracerProvider: tracing.Provider(), Triggers: trig})
	h.SetState(api.Starting)
	srv := &http.Server{Handler: h, ConnContext: h.ConnContext, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, len(lns)+1)
	var addrs []net.Addr
	for _, ln := range lns {
		go func() { errc <- srv.Serve(ln) }()
		addrs = append(addrs, ln.Addr())
	}
	if err := svc.Start(ctx); err != nil {
		_ = srv.Close()
		trig.Close()
		return errors.Join(err, svc.Close(context.Background()))
	}
	trig.Start(ctx)
	fsrv, faddr, err := serveFunctions(ctx, cfg, trig, errc, log)
	if err != nil {
		_ = srv.Close()
		trig.Close()
		return errors.Join(err, svc.Close(context.Background()))
	}
	if fsrv != nil {
		addrs = append(addrs, faddr)
	}
	h.SetState(api.Serving)
	if ml != nil {
		defer serveMetrics(ml, svc, errc, log).Close()
	}
	if ready != nil {
		ready(addrs)
	}
	select {
	case <-ctx.Done():
		log.Info("stopping")
		drain(h, cfg.DrainDelay, log)
	case err = <-errc:
	}
	return shutdown(srv, fsrv, trig, svc, err)
}

// shutdown stops serving in order, within 30 s: the API's listeners, the
// functions listener, the triggers (running asynchronous invocations go back
// to the queue), then the daemon. It returns runErr unless that only says
// the server closed, in which case the daemon's closing error.
func shutdown(srv, fsrv *http.Server, trig *triggers.Triggers, svc *daemon.Service, runErr error) error {
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx) // closes every listener
	if fsrv != nil {
		_ = fsrv.Shutdown(sctx)
	}
	trig.Close()
	if cerr := svc.Close(sctx); runErr == nil || errors.Is(runErr, http.ErrServerClosed) {
		return cerr
	}
	return runErr
}

// listenAll listens on every API address and, if set, on --metrics-listen
// (ml nil otherwise); on failure it closes what it opened.
func listenAll(cfg serveConfig, p *plan, log *slog.Logger) (lns []net.Listener, ml net.Listener, err error) {
	if lns, err = openListeners(cfg, p, log); err != nil {
		return nil, nil, err
	}
	if p.metrics == nil {
		return lns, nil, nil
	}
	if ml, err = net.Listen("tcp", p.metrics.Address); err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, nil, fmt.Errorf("--metrics-listen %s: %w", p.metrics.Address, err)
	}
	return lns, ml, nil
}

// serveMetrics serves the metrics alone on ml; the server's end goes to errc.
func serveMetrics(ml net.Listener, svc *daemon.Service, errc chan<- error, log *slog.Logger) *http.Server {
	msrv := &http.Server{Handler: metricsOnly(svc), ReadHeaderTimeout: 10 * time.Second}
	go func() { errc <- msrv.Serve(ml) }()
	log.Info("metrics served", "address", ml.Addr().String())
	return msrv
}

// drain answers health checks with 503 draining for delay while requests
// are still served, so load balancers take the node out before its
// listeners close.
func drain(h *api.Handler, delay time.Duration, log *slog.Logger) {
	h.SetState(api.Draining)
	if delay > 0 {
		log.Info("draining", "delay", delay)
		time.Sleep(delay)
	}
}

// flushSpans exports the spans still queued, the daemon's last ones
// included (it has stopped by then).
func flushSpans(t *telemetry.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing", "err", err)
	}
}

// openListeners resolves the token if TCP is served, then listens on every
// address (TLS on TCP when a certificate is given). On failure it closes
// what it opened.
func openListeners(cfg serveConfig, p *plan, log *slog.Logger) (lns []net.Listener, err error) {
	defer func() {
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			lns = nil
		}
	}()
	if p.tcp && p.token == "" {
		tok, created, err := api.LoadOrCreateToken(cfg.Daemon.DataDir)
		if err != nil {
			return nil, err
		}
		p.token = tok
		log.Info("API token for TCP clients", "file", filepath.Join(cfg.Daemon.DataDir, api.TokenFileName), "created", created)
	} else if p.tcp {
		log.Info("API token for TCP clients", "file", cfg.TokenFile)
	}
	for _, a := range p.addrs {
		var ln net.Listener
		if a.Network == "unix" {
			ln, err = api.ListenUnix(a.Address, p.gid)
		} else {
			ln, err = net.Listen("tcp", a.Address)
			if err != nil {
				err = fmt.Errorf("listen %s: %w", a.Address, err)
			} else if p.tls != nil {
				ln = tls.NewListener(ln, p.tls)
			}
		}
		if err != nil {
			return lns, err
		}
		lns = append(lns, ln)
		log.Info("serving API", "listen", a.String(), "tls", a.Network == "tcp" && p.tls != nil)
	}
	return lns, nil
}

// metricsOnly serves GET /metrics and nothing else.
func metricsOnly(svc *daemon.Service) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(svc.Metrics().Registry, promhttp.HandlerOpts{}))
	return mux
}
