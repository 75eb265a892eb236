// Package triggers calls functions the way applications do: HTTP
// endpoints on a listener of their own (endpoints.go, functions.go),
// durable asynchronous invocations with retries, destinations and dead
// letters (async.go, worker.go, destinations.go), and cron schedules
// (schedules.go), on NATS JetStream (engine.go). It reaches the daemon
// only through Invoker.
package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Invoker runs one invocation of a function reference (NAME, NAME:VERSION
// or NAME:ALIAS) through the daemon's cold, pooled or warm path; timeout 0
// is the daemon's default. daemon.Service does it with InvokeCold.
type Invoker interface {
	Invoke(ctx context.Context, ref string, event json.RawMessage, timeout time.Duration) (*wire.Invocation, error)
	// CheckRef says whether ref names a function (and alias or version)
	// that exists.
	CheckRef(ctx context.Context, ref string) error
	// MaxConcurrency is a function's bound on its live VMs (0: none).
	MaxConcurrency(ctx context.Context, function string) (int, error)
}

// Errors are the daemon's sentinels, so the API maps them as it maps the
// daemon's, and ErrEngine.
var (
	ErrInvalid  = daemon.ErrInvalid
	ErrNotFound = daemon.ErrNotFound
	ErrExists   = daemon.ErrExists
	// ErrEngine: JetStream did not answer (503); nothing was changed.
	ErrEngine = errors.New("trigger engine unavailable")
)

// Config is the triggers' part of thawd's configuration.
type Config struct {
	DataDir  string // the embedded server's store goes under it
	NodeName string
	// NATSURL is an external NATS cluster's URL (nats://h1:4222,nats://h2:4222);
	// empty: embedded JetStream.
	NATSURL   string
	NATSCreds string // a .creds file for the external cluster
	Replicas  int    // stream and bucket replicas on the external cluster (1 embedded)

	// Asynchronous invocation defaults (a function's AsyncConfig overrides them).
	MaxRetries   int
	MaxEventAge  time.Duration
	Backoff      time.Duration
	Concurrency  int // per function, across nodes
	AsyncWorkers int // asynchronous invocations this node runs at once, all functions
	// AckWait is how long a node's silence on a running invocation lets
	// the engine hand it to another node (it reports progress at a third
	// of it).
	AckWait time.Duration
	// StateTTL is how long asynchronous invocations' states (and so their
	// idempotency keys) are kept.
	StateTTL         time.Duration
	DeadLetterMaxAge time.Duration
	// DestinationAllow lists host:port webhooks may reach besides public
	// addresses (which need AllowPublicDestinations).
	DestinationAllow        []string
	AllowPublicDestinations bool

	// LeaseTTL is how long a node's lease on the schedules lasts unless
	// renewed.
	LeaseTTL time.Duration

	// MaxBodyBytes bounds an endpoint request's body (413 beyond).
	MaxBodyBytes int64
	// MaxInFlight bounds endpoint requests being served at once (503 beyond).
	MaxInFlight int
	// QueueTimeout is how long an endpoint request waits for one of its
	// function's max_concurrency slots before 503.
	QueueTimeout time.Duration
	// AdminToken is the operator's API token: a functions-listener request
	// carrying it is refused.
	AdminToken string

	TracerProvider trace.TracerProvider
	Registerer     prometheus.Registerer
}

// Defaults of Config's asynchronous settings.
const (
	DefaultMaxRetries   = 2
	DefaultMaxEventAge  = 6 * time.Hour
	DefaultBackoff      = time.Second
	DefaultConcurrency  = 2
	DefaultAckWait      = 30 * time.Second
	DefaultStateTTL     = 24 * time.Hour
	DefaultDLQMaxAge    = 14 * 24 * time.Hour
	DefaultLeaseTTL     = 6 * time.Second
	DefaultMaxBodyBytes = 6 << 20
	DefaultMaxInFlight  = 256
	DefaultQueueTimeout = 10 * time.Second
)

func (c *Config) fill() {
	if c.MaxRetries < 0 {
		c.MaxRetries = 0
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.MaxEventAge, DefaultMaxEventAge)
	def(&c.Backoff, DefaultBackoff)
	def(&c.AckWait, DefaultAckWait)
	def(&c.StateTTL, DefaultStateTTL)
	def(&c.DeadLetterMaxAge, DefaultDLQMaxAge)
	def(&c.LeaseTTL, DefaultLeaseTTL)
	def(&c.QueueTimeout, DefaultQueueTimeout)
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.AsyncWorkers <= 0 {
		c.AsyncWorkers = 4
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
}

// Check reports every problem of the configuration at once.
func (c Config) Check() error {
	var errs []error
	if c.MaxRetries < 0 || c.MaxRetries > 100 {
		errs = append(errs, fmt.Errorf("--async-retries %d: use 0 to 100", c.MaxRetries))
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("--nats-replicas %d: use 1 to 5", c.Replicas))
	}
	if c.NATSURL == "" && c.Replicas > 1 {
		errs = append(errs, fmt.Errorf("--nats-replicas %d needs an external cluster (--nats-url)", c.Replicas))
	}
	if c.NATSURL == "" && c.NATSCreds != "" {
		errs = append(errs, errors.New("--nats-creds needs --nats-url"))
	}
	for _, a := range c.DestinationAllow {
		if _, err := parseHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("--destination-allow %q: %w", a, err))
		}
	}
	if c.AckWait != 0 && c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("--async-ack-wait %s: at least 1s", c.AckWait))
	}
	return errors.Join(errs...)
}

// Triggers is the engine with the endpoints, asynchronous invocations
// and schedules on it.
type Triggers struct {
	cfg     Config
	inv     Invoker
	log     *slog.Logger
	e       *engine
	m       *metricSet
	tracer  trace.Tracer
	dests   *destinations
	workers *workers
	sched   *scheduler

	mu      sync.Mutex
	routes  *routes // the functions listener's table, once it has one
	cancel  context.CancelFunc
	stopped sync.WaitGroup
}

// Open connects to (or starts) JetStream and prepares its streams and
// buckets; nothing runs until Start.
func Open(ctx context.Context, cfg Config, inv Invoker, log *slog.Logger) (*Triggers, error) {
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	cfg.fill()
	e, err := openEngine(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	t := &Triggers{cfg: cfg, inv: inv, log: log, e: e, tracer: cfg.TracerProvider.Tracer(TracerName)}
	t.m = newMetrics(cfg.Registerer, t)
	t.dests = newDestinations(cfg, e, t.m, log)
	t.workers = newWorkers(t)
	t.sched = newScheduler(t)
	return t, nil
}

// TracerName names the triggers' tracer.
const TracerName = "github.com/thaw-dev/thaw/internal/triggers"

// Start runs the asynchronous workers and the scheduler until Close.
func (t *Triggers) Start(ctx context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cancel != nil {
		return
	}
	ctx, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
	t.stopped.Add(2)
	go func() { defer t.stopped.Done(); t.workers.run(ctx) }()
	go func() { defer t.stopped.Done(); t.sched.run(ctx) }()
}

// Close stops the workers (an invocation still running is handed to
// another node, or to this one after a restart) and the engine.
func (t *Triggers) Close() {
	t.mu.Lock()
	if t.cancel != nil {
		t.cancel()
	}
	t.mu.Unlock()
	t.stopped.Wait()
	t.e.close()
}
