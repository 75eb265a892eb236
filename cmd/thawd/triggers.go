package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/triggers"
	"github.com/thaw-dev/thaw/wire"
)

// triggerSettings are the functions listener's and the triggers' settings.
type triggerSettings struct {
	FunctionsListen  string // host:port of the functions listener; "": none
	FunctionsTLSCert string
	FunctionsTLSKey  string
	Triggers         triggers.Config
}

// defineTriggerFlags adds the triggers' settings to thawd's.
func defineTriggerFlags(fs *pflag.FlagSet, t *triggerSettings) {
	c := &t.Triggers
	fs.StringVar(&t.FunctionsListen, "functions-listen", "", "host:port serving function endpoints to their callers (thaw endpoint create), apart from the API: endpoint keys, never the API token; off loopback it needs --functions-tls-cert (default: no functions listener)")
	fs.StringVar(&t.FunctionsTLSCert, "functions-tls-cert", "", "TLS certificate (PEM) of the functions listener (HTTP/2 over TLS; without it, HTTP/1.1 and cleartext HTTP/2)")
	fs.StringVar(&t.FunctionsTLSKey, "functions-tls-key", "", "TLS private key (PEM) of --functions-tls-cert")
	fs.Int64Var(&c.MaxBodyBytes, "functions-max-body", triggers.DefaultMaxBodyBytes, "bytes an endpoint request's body may have (413 beyond)")
	fs.IntVar(&c.MaxInFlight, "functions-max-inflight", triggers.DefaultMaxInFlight, "endpoint requests served at once (503 with Retry-After beyond)")
	fs.DurationVar(&c.QueueTimeout, "functions-queue-timeout", triggers.DefaultQueueTimeout, "how long an endpoint request waits for a slot of its function's max_concurrency (503 with Retry-After after)")
	fs.StringVar(&c.NATSURL, "nats-url", "", "NATS cluster (with JetStream) the nodes share for asynchronous invocations, schedules and endpoints, e.g. nats://h1:4222,nats://h2:4222 (default: JetStream embedded, stored in <data-dir>/"+triggers.StoreDirName+")")
	fs.StringVar(&c.NATSCreds, "nats-creds", "", "credentials file (.creds) for --nats-url")
	fs.IntVar(&c.Replicas, "nats-replicas", 1, "replicas of thaw's streams and buckets on the --nats-url cluster (3 survives a server's loss)")
	fs.IntVar(&c.MaxRetries, "async-retries", triggers.DefaultMaxRetries, "retries of a failed asynchronous invocation after its first attempt (a function's async settings override it)")
	fs.DurationVar(&c.MaxEventAge, "async-max-event-age", triggers.DefaultMaxEventAge, "how long an asynchronous invocation is tried before it expires to its failure destination")
	fs.DurationVar(&c.Backoff, "async-backoff", triggers.DefaultBackoff, "delay before the first retry; each further retry waits twice as long, with jitter")
	fs.IntVar(&c.Concurrency, "async-concurrency", triggers.DefaultConcurrency, "a function's asynchronous invocations running at once, across nodes (a function's async settings override it)")
	fs.IntVar(&c.AsyncWorkers, "async-workers", 4, "asynchronous invocations this node runs at once, all functions together (synchronous callers keep the rest)")
	fs.DurationVar(&c.AckWait, "async-ack-wait", triggers.DefaultAckWait, "how long after a node stops answering (a crash) its running asynchronous invocation is handed to another node, or to it after a restart")
	fs.DurationVar(&c.StateTTL, "async-state-ttl", triggers.DefaultStateTTL, "how long asynchronous invocations' states are kept after their last change (and so how long an idempotency key makes repeats one invocation)")
	fs.DurationVar(&c.DeadLetterMaxAge, "dead-letter-max-age", triggers.DefaultDLQMaxAge, "how long dead letters are kept")
	fs.StringArrayVar(&c.DestinationAllow, "destination-allow", nil, "host:port that webhook destinations may reach, repeatable (loopback and private addresses need it)")
	fs.BoolVar(&c.AllowPublicDestinations, "allow-public-destinations", false, "let webhook destinations reach public addresses (never loopback or private ones unless --destination-allow lists them)")
}

// checkTriggers validates the triggers' settings.
func checkTriggers(t triggerSettings) (*tls.Config, []error) {
	var errs []error
	if err := t.Triggers.Check(); err != nil {
		errs = append(errs, unjoin(err)...)
	}
	var conf *tls.Config
	if (t.FunctionsTLSCert == "") != (t.FunctionsTLSKey == "") {
		errs = append(errs, errors.New("--functions-tls-cert and --functions-tls-key go together"))
	} else if t.FunctionsTLSCert != "" {
		var err error
		if conf, err = api.LoadTLS(t.FunctionsTLSCert, t.FunctionsTLSKey); err != nil {
			errs = append(errs, fmt.Errorf("--functions-tls-cert: %w", err))
		}
	}
	if t.FunctionsListen != "" {
		a, err := api.ParseAddr(t.FunctionsListen)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--functions-listen: %w", err))
		case a.Network != "tcp":
			errs = append(errs, fmt.Errorf("--functions-listen %s: want host:port", t.FunctionsListen))
		case !a.Loopback() && t.FunctionsTLSCert == "":
			errs = append(errs, fmt.Errorf("--functions-listen %s: not a loopback address, so it needs TLS: give --functions-tls-cert and --functions-tls-key", t.FunctionsListen))
		}
	}
	if t.Triggers.MaxBodyBytes < 0 || t.Triggers.MaxBodyBytes > 64<<20 {
		errs = append(errs, fmt.Errorf("--functions-max-body %d: use 1 to %d", t.Triggers.MaxBodyBytes, 64<<20))
	}
	return conf, errs
}

// serviceInvoker runs the triggers' invocations through the daemon's cold,
// pooled or warm path.
type serviceInvoker struct{ svc *daemon.Service }

func (si serviceInvoker) Invoke(ctx context.Context, ref string, event json.RawMessage, timeout time.Duration) (*wire.Invocation, error) {
	return si.svc.InvokeCold(ctx, daemon.ColdRequest{Function: ref, InvokeRequest: daemon.InvokeRequest{Event: event, Timeout: timeout}})
}

func (si serviceInvoker) CheckRef(ctx context.Context, ref string) error {
	r, err := daemon.ParseRef(ref)
	if err != nil {
		return err
	}
	if _, err := si.svc.GetFunction(ctx, r.Function); err != nil {
		if reg := si.svc.Info().Registry; errors.Is(err, daemon.ErrNotFound) && r.Alias == "" && r.Version == 0 && reg != nil && reg.Import {
			return nil // the invocation imports it from the registry, as the API's would
		}
		return err
	}
	if r.Alias != "" {
		_, err = si.svc.GetAlias(ctx, r.Function, r.Alias)
	} else if r.Version > 0 {
		_, err = si.svc.GetVersion(ctx, r.Function, r.Version)
	}
	return err
}

func (si serviceInvoker) MaxConcurrency(ctx context.Context, function string) (int, error) {
	f, err := si.svc.GetFunction(ctx, function)
	if errors.Is(err, daemon.ErrNotFound) {
		return 0, nil // not here (yet): the invocation says
	}
	if err != nil {
		return 0, err
	}
	return f.MaxConcurrency, nil
}

// openTriggers opens the engine for svc (nothing runs yet). The admin
// token, if the daemon has one, is refused on the functions listener.
func openTriggers(ctx context.Context, cfg serveConfig, svc *daemon.Service, token string, log *slog.Logger) (*triggers.Triggers, error) {
	tc := cfg.Triggers.Triggers
	tc.DataDir, tc.NodeName = cfg.Daemon.DataDir, nodeName(cfg)
	tc.TracerProvider, tc.Registerer = cfg.Daemon.TracerProvider, svc.Metrics().Registry
	tc.AdminToken = token
	if tc.AdminToken == "" {
		if tok, err := api.ReadTokenFile(filepath.Join(cfg.Daemon.DataDir, api.TokenFileName)); err == nil {
			tc.AdminToken = tok
		} else if !errors.Is(err, os.ErrNotExist) {
			log.Warn("API token file unreadable; the functions listener cannot recognize the token", "err", err)
		}
	}
	t, err := triggers.Open(ctx, tc, serviceInvoker{svc}, log.With("component", "triggers"))
	if err != nil {
		return nil, fmt.Errorf("triggers: %w", err)
	}
	return t, nil
}

// serveFunctions starts the functions listener, if one is configured;
// the returned server is closed by the caller.
func serveFunctions(ctx context.Context, cfg serveConfig, t *triggers.Triggers, errc chan<- error, log *slog.Logger) (*http.Server, net.Addr, error) {
	ts := cfg.Triggers
	if ts.FunctionsListen == "" {
		return nil, nil, nil
	}
	conf, _ := checkTriggers(ts)
	srv, err := t.FunctionsServer(ctx, conf, cfg.Daemon.InvokeTimeout)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", ts.FunctionsListen)
	if err != nil {
		return nil, nil, fmt.Errorf("--functions-listen %s: %w", ts.FunctionsListen, err)
	}
	go func() {
		if conf != nil {
			errc <- srv.ServeTLS(ln, "", "") // HTTP/2 negotiated by ALPN
			return
		}
		errc <- srv.Serve(ln)
	}()
	log.Info("serving function endpoints", "listen", ln.Addr().String(), "tls", conf != nil)
	return srv, ln.Addr(), nil
}
