package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The engine is NATS JetStream: embedded in thawd (its store in the data
// directory, file storage, every write synced) or an external NATS
// cluster the nodes share (--nats-url).

// Streams, subjects and buckets.
const (
	asyncStream   = "THAW_ASYNC"
	asyncSubject  = "thaw.async." // + function name
	dlqStream     = "THAW_DLQ"
	dlqSubject    = "thaw.dlq." // + function name
	endpointsKV   = "thaw_endpoints"
	asyncConfKV   = "thaw_async_config"
	asyncStateKV  = "thaw_async_state"
	schedulesKV   = "thaw_schedules"
	scheduleRunKV = "thaw_schedule_runs"
	leasesKV      = "thaw_leases"
	// StoreDirName is the embedded server's store under the data directory.
	StoreDirName = "jetstream"
)

// engine is a connection to JetStream and the streams and buckets thaw
// uses there.
type engine struct {
	srv *server.Server // the embedded server; nil with an external one
	nc  *nats.Conn
	js  jetstream.JetStream

	endpoints, asyncConf, asyncState, schedules, scheduleRuns, leases jetstream.KeyValue
}

// openEngine starts the embedded server (cfg.NATSURL empty) or connects to
// an external one, and creates or updates the streams and buckets.
func openEngine(ctx context.Context, cfg Config, log *slog.Logger) (*engine, error) {
	e := &engine{}
	var err error
	if cfg.NATSURL == "" {
		if e.srv, err = startEmbedded(cfg); err != nil {
			return nil, err
		}
		e.nc, err = nats.Connect("", nats.InProcessServer(e.srv), nats.Name("thawd"))
	} else {
		opts := []nats.Option{nats.Name("thawd " + cfg.NodeName), nats.MaxReconnects(-1), nats.ReconnectWait(500 * time.Millisecond),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					log.Warn("nats disconnected", "err", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted()) })}
		if cfg.NATSCreds != "" {
			opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
		}
		e.nc, err = nats.Connect(cfg.NATSURL, opts...)
	}
	if err != nil {
		e.close()
		return nil, fmt.Errorf("%w: connect to nats: %v", ErrEngine, err)
	}
	if e.js, err = jetstream.New(e.nc); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: jetstream: %v", ErrEngine, err)
	}
	// A cluster that has just started elects its JetStream leaders first:
	// try again for a while.
	for deadline := time.Now().Add(setupPatience); ; {
		err := e.setup(ctx, cfg)
		if err == nil {
			return e, nil
		}
		if cfg.NATSURL == "" || time.Now().After(deadline) || ctx.Err() != nil {
			e.close()
			return nil, err
		}
		log.Info("waiting for the nats cluster's jetstream", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// setupPatience is how long thawd waits for an external cluster's
// JetStream to take its streams and buckets.
const setupPatience = 90 * time.Second

// startEmbedded runs a JetStream server inside thawd, reachable only in
// process (it listens on no port).
func startEmbedded(cfg Config) (*server.Server, error) {
	dir := filepath.Join(cfg.DataDir, StoreDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	name := cfg.NodeName
	if name == "" {
		name = "thawd"
	}
	opts := &server.Options{ServerName: name, JetStream: true, StoreDir: dir, SyncAlways: true, DontListen: true,
		NoSigs: true, NoLog: true, JetStreamMaxMemory: 64 << 20}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: embedded nats server: %v", ErrEngine, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("%w: embedded nats server did not start in 30 s (store %s)", ErrEngine, dir)
	}
	return srv, nil
}

// setup creates or updates thaw's streams and buckets.
func (e *engine) setup(ctx context.Context, cfg Config) error {
	replicas := max(cfg.Replicas, 1)
	streams := []jetstream.StreamConfig{
		{Name: asyncStream, Subjects: []string{asyncSubject + "*"}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Replicas: replicas, Duplicates: dedupWindow,
			Description: "thaw asynchronous invocations, one subject per function"},
		{Name: dlqStream, Subjects: []string{dlqSubject + "*"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: replicas, MaxAge: cfg.DeadLetterMaxAge,
			Description: "thaw dead letters: outcomes of asynchronous invocations"},
	}
	for _, sc := range streams {
		if _, err := e.js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("%w: stream %s: %v", ErrEngine, sc.Name, err)
		}
	}
	buckets := []struct {
		dst *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
	}{
		{&e.endpoints, jetstream.KeyValueConfig{Bucket: endpointsKV, Description: "thaw function endpoints"}},
		{&e.asyncConf, jetstream.KeyValueConfig{Bucket: asyncConfKV, Description: "thaw asynchronous invocation settings per function"}},
		{&e.asyncState, jetstream.KeyValueConfig{Bucket: asyncStateKV, TTL: cfg.StateTTL, Description: "thaw asynchronous invocations' states"}},
		{&e.schedules, jetstream.KeyValueConfig{Bucket: schedulesKV, Description: "thaw schedules"}},
		{&e.scheduleRuns, jetstream.KeyValueConfig{Bucket: scheduleRunKV, Description: "thaw schedules' last firing"}},
		{&e.leases, jetstream.KeyValueConfig{Bucket: leasesKV, TTL: cfg.LeaseTTL, Storage: jetstream.FileStorage,
			Description: "thaw leases: which node runs the schedules"}},
	}
	for _, b := range buckets {
		b.cfg.Replicas = replicas
		kv, err := e.js.CreateOrUpdateKeyValue(ctx, b.cfg)
		if err != nil {
			return fmt.Errorf("%w: bucket %s: %v", ErrEngine, b.cfg.Bucket, err)
		}
		*b.dst = kv
	}
	return nil
}

// dedupWindow is how long the async stream drops a second message with
// the same id (an idempotency key, a schedule's tick).
const dedupWindow = 10 * time.Minute

// close drains the connection and stops the embedded server.
func (e *engine) close() {
	if e.nc != nil {
		if err := e.nc.Drain(); err != nil {
			e.nc.Close()
		}
		deadline := time.Now().Add(5 * time.Second)
		for !e.nc.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
}

// getRecord reads key of kv, a JSON T, and its revision: notFound if there
// is none; what names the record in the other errors.
func getRecord[T any](ctx context.Context, kv jetstream.KeyValue, what, key string, notFound error) (*T, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		if isNotFound(err) {
			return nil, 0, notFound
		}
		return nil, 0, fmt.Errorf("%w: read %s: %v", ErrEngine, what, err)
	}
	var v T
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, 0, fmt.Errorf("%w: %s %s is malformed: %v", ErrEngine, what, key, err)
	}
	return &v, e.Revision(), nil
}

// keys lists a bucket's keys, sorted.
func keys(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	l, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: list %s: %v", ErrEngine, kv.Bucket(), err)
	}
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

// listRecords reads every key of kv with get, in key order, leaving out
// those deleted meanwhile (get's ErrNotFound).
func listRecords[T any](ctx context.Context, kv jetstream.KeyValue, get func(context.Context, string) (T, error)) ([]T, error) {
	names, err := keys(ctx, kv)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, n := range names {
		v, err := get(ctx, n)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// purgeRecord deletes key from kv once get finds it (get's error
// otherwise: an invalid name or ErrNotFound); what names the record.
func purgeRecord[T any](ctx context.Context, kv jetstream.KeyValue, what, key string, get func(context.Context, string) (T, uint64, error)) error {
	if _, _, err := get(ctx, key); err != nil {
		return err
	}
	if err := kv.Purge(ctx, key); err != nil {
		return fmt.Errorf("%w: delete %s: %v", ErrEngine, what, err)
	}
	return nil
}

// isNotFound says whether err is JetStream's "no such key" or "no such
// message".
func isNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrMsgNotFound)
}
