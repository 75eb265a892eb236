package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/signing"
)

// Leases keep garbage collection and writers apart. Chunks and code
// archives are shared, so a push that finds a chunk already stored skips
// it; were a collection to delete that (unreferenced) chunk before the
// push wrote its manifest, the manifest would name a missing chunk. A
// writer (Push, PushFunction) first writes locks/push/<token>.json, then
// looks for locks/gc.json; a collection first writes locks/gc.json, then
// looks for push leases. With the store's read-after-write consistency at
// least one of two racing sides sees the other: the writer backs off and
// waits, the collection waits for running writers. A lease is renewed
// every LeaseTTL/4 while its holder runs; one not renewed for LeaseTTL
// (its holder died) is ignored and removed by the next collection.
var LeaseTTL = 2 * time.Minute

const (
	gcLeaseKey    = "locks/gc.json"
	pushLeasePfx  = "locks/push/"
	leasePoll     = 500 * time.Millisecond
	DefaultGCWait = 10 * time.Minute
)

type leaseBody struct {
	Kind    string    `json:"kind"` // "push" or "gc"
	What    string    `json:"what"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

// lease is a held lease object, renewed in the background until released.
type lease struct {
	s      *Store
	key    string
	body   []byte
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Store) writeLease(ctx context.Context, key, kind, what string) (*lease, error) {
	host, _ := os.Hostname()
	b, _ := json.Marshal(leaseBody{Kind: kind, What: what, Host: host, PID: os.Getpid(), Started: time.Now().UTC()})
	if err := s.put(ctx, key, b, "application/json"); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &lease{s: s, key: key, body: b, cancel: cancel, done: make(chan struct{})}
	go l.renew(rctx)
	return l, nil
}

func (l *lease) renew(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(LeaseTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A failed renewal is retried at the next tick; a holder
			// that cannot reach the store cannot write through it either.
			_ = l.s.put(ctx, l.key, l.body, "application/json")
		}
	}
}

// release stops the renewal and removes the lease object.
func (l *lease) release() {
	l.cancel()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = l.s.remove(ctx, []string{l.key})
}

// liveLeases lists the lease objects under prefix renewed within LeaseTTL,
// and those that are stale.
func (s *Store) liveLeases(ctx context.Context, prefix string) (live, stale []string, err error) {
	for o, err := range s.list(ctx, prefix) {
		if err != nil {
			return nil, nil, err
		}
		if time.Since(o.ModTime) < LeaseTTL {
			live = append(live, o.Key)
		} else {
			stale = append(stale, o.Key)
		}
	}
	return live, stale, nil
}

// pushLease takes a writer's lease, waiting while a collection runs.
func (s *Store) pushLease(ctx context.Context, what string) (*lease, error) {
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	key := pushLeasePfx + hex.EncodeToString(tok) + ".json"
	for {
		l, err := s.writeLease(ctx, key, "push", what)
		if err != nil {
			return nil, err
		}
		gc, _, err := s.liveLeases(ctx, gcLeaseKey)
		if err != nil || len(gc) == 0 {
			if err != nil {
				l.release()
				return nil, err
			}
			return l, nil
		}
		l.release()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("push %s: waiting for the registry's garbage collection to finish: %w", what, ctx.Err())
		case <-time.After(leasePoll):
		}
	}
}

// GCOptions tunes a collection.
type GCOptions struct {
	// Grace keeps unreferenced objects younger than this: chunks of a
	// push whose writer died before its lease says so, and a margin for
	// nodes still restoring lazily from a snapshot deleted moments ago.
	Grace time.Duration
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// Wait bounds how long the collection waits for running pushes
	// (0: DefaultGCWait).
	Wait time.Duration
}

// GCStats says what a collection found and did.
type GCStats struct {
	Snapshots     int           `json:"snapshots"`      // remote manifests read
	Functions     int           `json:"functions"`      // function records read
	Chunks        int           `json:"chunks"`         // chunk objects listed
	ChunksDeleted int           `json:"chunks_deleted"` // unreferenced and older than the grace
	BytesDeleted  int64         `json:"bytes_deleted"`  // their stored bytes (code archives included)
	ChunksYoung   int           `json:"chunks_young"`   // unreferenced but within the grace: kept
	CodeDeleted   int           `json:"code_deleted"`   // unreferenced code archives deleted
	StaleLeases   int           `json:"stale_leases"`   // leases of dead holders removed
	BytesKept     int64         `json:"bytes_kept"`     // stored bytes of the chunks and code archives kept
	DryRun        bool          `json:"dry_run"`        // nothing was deleted
	Waited        time.Duration `json:"-"`              // waiting for running pushes
}

// GC deletes the chunks and code archives that no remote manifest or
// function record names and that are older than opts.Grace. It reads every
// manifest and record first and deletes nothing if one of them cannot be
// read or fails its checks: an object it cannot account for might hold
// the only reference to a chunk.
func (s *Store) GC(ctx context.Context, opts GCOptions) (GCStats, error) {
	st := GCStats{DryRun: opts.DryRun}
	wait := opts.Wait
	if wait <= 0 {
		wait = DefaultGCWait
	}
	l, err := s.writeLease(ctx, gcLeaseKey, "gc", "")
	if err != nil {
		return st, err
	}
	defer l.release()
	t0 := time.Now()
	for {
		live, stale, err := s.liveLeases(ctx, pushLeasePfx)
		if err != nil {
			return st, err
		}
		if len(live) == 0 {
			if !opts.DryRun {
				st.StaleLeases = len(stale)
				if err := s.remove(ctx, stale); err != nil {
					return st, err
				}
			}
			break
		}
		if time.Since(t0) > wait {
			return st, fmt.Errorf("%w: %d push(es) still running after %s (%s)", ErrBusy, len(live), wait, strings.Join(live, ", "))
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(leasePoll):
		}
	}
	st.Waited = time.Since(t0)

	keep, err := s.referenced(ctx, &st)
	if err != nil {
		return st, err
	}
	var doomed []string
	for _, prefix := range []string{"chunks/", "code/"} {
		for o, err := range s.list(ctx, prefix) {
			if err != nil {
				return st, err
			}
			isChunk := prefix == "chunks/"
			if isChunk {
				st.Chunks++
			}
			switch {
			case keep[o.Key]:
				st.BytesKept += o.Size
			case time.Since(o.ModTime) < opts.Grace:
				st.BytesKept += o.Size
				if isChunk {
					st.ChunksYoung++
				}
			default:
				doomed = append(doomed, o.Key)
				st.BytesDeleted += o.Size
				if isChunk {
					st.ChunksDeleted++
				} else {
					st.CodeDeleted++
				}
			}
		}
	}
	if opts.DryRun {
		return st, nil
	}
	return st, s.remove(ctx, doomed)
}

// referenced reads every remote manifest and function record and returns
// the object keys they name. Signatures do not matter here: a reference
// from a record no node trusts can only keep an object, and skipping one
// could delete the chunks of a snapshot another node's keys accept.
func (s *Store) referenced(ctx context.Context, st *GCStats) (map[string]bool, error) {
	keep := map[string]bool{}
	err := s.eachManifest(ctx, func(m *RemoteManifest, _ string, _ *signing.Refusal) {
		st.Snapshots++
		for _, sum := range m.ChunkSums() {
			keep[chunkKey(sum)] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("gc: nothing deleted: %w", err)
	}
	for o, err := range s.list(ctx, "functions/") {
		if err != nil {
			return nil, err
		}
		name, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, "functions/"), ".json")
		if !ok || !nameRE.MatchString(name) {
			continue
		}
		r, _, err := s.readFunction(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("gc: nothing deleted: function %s: %w", name, err)
		}
		st.Functions++
		keep[r.Code] = true
	}
	if err := s.versionCode(ctx, keep); err != nil {
		return nil, fmt.Errorf("gc: nothing deleted: %w", err)
	}
	return keep, nil
}

// readFunction reads a function record, trusted or not (readRecord): the
// refusal, if any, says it is not to be acted on.
func (s *Store) readFunction(ctx context.Context, name string) (*FunctionRecord, *signing.Refusal, error) {
	b, _, refused, err := s.readRecord(ctx, KindFunction, functionKey(name))
	if err != nil {
		return nil, nil, err
	}
	r, err := decodeFunctionRecordOf(b, name)
	return r, refused, err
}

// eachManifest reads and checks every remote manifest in the bucket,
// trusted or not (fn gets the key id it names and, if refused, why); one
// that cannot be read or decoded stops the walk with its error.
func (s *Store) eachManifest(ctx context.Context, fn func(m *RemoteManifest, keyID string, refused *signing.Refusal)) error {
	for o, err := range s.list(ctx, "snapshots/") {
		if err != nil {
			return err
		}
		id, ok := manifestID(o.Key)
		if !ok {
			continue
		}
		b, keyID, refused, err := s.readRecord(ctx, KindManifest, o.Key)
		if err == nil {
			var m *RemoteManifest
			if m, err = decodeManifestAt(b, id); err == nil {
				fn(m, keyID, refused)
				continue
			}
		}
		return fmt.Errorf("snapshot %s: %w", id, err)
	}
	return nil
}

func manifestID(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "snapshots/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/manifest.json")
	return id, ok && idRE.MatchString(id)
}

// Listed is a snapshot in the registry: its manifest, when it was taken,
// whether its function's record names it as the newest, and, when this
// node would refuse it, why.
type Listed struct {
	*RemoteManifest
	CreatedAt time.Time
	Latest    bool
	// SignedBy is the key id the manifest names ("" when unsigned).
	SignedBy string
	// Refused is why this node does not trust the manifest (then the
	// fields above are what it claims, unverified); nil when trusted.
	Refused *signing.Refusal
}

// ListSnapshots reads every remote manifest, newest first, trusted or not
// (Listed.Refused). A manifest that cannot be read fails the listing: the
// registry is damaged and says so. Latest follows trusted records only.
func (s *Store) ListSnapshots(ctx context.Context) ([]Listed, error) {
	var out []Listed
	err := s.eachManifest(ctx, func(m *RemoteManifest, keyID string, refused *signing.Refusal) {
		l := Listed{RemoteManifest: m, SignedBy: keyID, Refused: refused}
		if local, err := m.LocalManifest(); err == nil { // checked by decodeManifestAt
			l.CreatedAt = local.CreatedAt
		}
		out = append(out, l)
	})
	if err != nil {
		return nil, err
	}
	latest := map[string]string{}
	for i := range out {
		fn := out[i].Function
		if _, ok := latest[fn]; !ok {
			latest[fn] = ""
			r, refused, err := s.readFunction(ctx, fn)
			switch {
			case err == nil && refused == nil:
				latest[fn] = r.Latest
			case err != nil && !errors.Is(err, ErrNotFound):
				return nil, err
			}
		}
		out[i].Latest = out[i].Refused == nil && latest[fn] == out[i].ID
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// DeleteSnapshot removes a pushed snapshot's manifest, trusted or not (or
// a damaged object under its name);
// its chunks go at the next GC unless another manifest names them. When
// the (trusted) function record names it as the newest snapshot, the
// record moves to the function's newest remaining trusted snapshot,
// signed by this node, or is removed with the function's last one. Nodes
// that already pulled or imported it keep their copies.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("%w: snapshot id %q", ErrInvalid, id)
	}
	b, _, _, err := s.readRecord(ctx, KindManifest, manifestKey(id))
	var m *RemoteManifest
	if err == nil {
		m, err = decodeManifestAt(b, id) // what it claims: only its function's name is used
	}
	if err != nil && !errors.Is(err, ErrInvalid) {
		return err
	}
	if err := s.remove(ctx, []string{manifestKey(id)}); err != nil {
		return err
	}
	if m == nil {
		return nil // a damaged object under a manifest's name: no record to update
	}
	r, refused, err := s.readFunction(ctx, m.Function)
	if errors.Is(err, ErrNotFound) || refused != nil {
		return nil // no record, or one no node here acts on: left as it is
	}
	if err != nil || r.Latest != id {
		return err
	}
	all, err := s.ListSnapshots(ctx)
	if err != nil {
		return err
	}
	for _, o := range all { // newest first
		if o.Function == m.Function && o.Refused == nil {
			r.Latest, r.LatestCreatedAt = o.ID, o.CreatedAt
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			return s.PutRecord(ctx, KindFunction, functionKey(r.Name), b)
		}
	}
	return s.remove(ctx, []string{functionKey(r.Name)})
}
