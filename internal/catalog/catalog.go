// Package catalog is the daemon's durable record of functions, VMs,
// snapshots and invocations, in an embedded SQLite database in the data
// directory. Everything the API accepted is written here before the API
// answers, so a restart of the daemon loses nothing.
package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned when creating a record whose key is taken.
var ErrExists = errors.New("already exists")

// Function is a deployable function.
type Function struct {
	Name      string  `json:"name"`
	Digest    string  `json:"digest"`     // SHA-256 of the code tree
	CodeDir   string  `json:"code_dir"`   // unpacked code, <dir>/<name>/handler.py
	Disk      string  `json:"disk"`       // ext4 image of CodeDir, attached read-only
	MemoryMiB int     `json:"memory_mib"` // guest memory
	VCPUs     int     `json:"vcpus"`
	Network   Network `json:"network"` // what its guests may reach
	// MaxConcurrency bounds the function's live VMs (0: no limit of its own).
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// KeepAliveS is how long its VMs are kept idle after a cold invocation,
	// in seconds: 0 the daemon's default, negative never.
	KeepAliveS int `json:"keep_alive_s,omitempty"`
	// VMMPool is how many standby VMs the VMM pool keeps per snapshot and
	// strategy (0: the daemon's default, negative: none); VMMPoolTTLS how
	// long one waits, in seconds (0: the daemon's default).
	VMMPool     int       `json:"vmm_pool,omitempty"`
	VMMPoolTTLS int       `json:"vmm_pool_ttl_s,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	// Env is the function's environment (in its snapshots); Secrets its
	// secret references, environment variable name -> secret name (set
	// only in restored VMs). Package fnconfig gives them meaning.
	Env     map[string]string `json:"env,omitempty"`
	Secrets map[string]string `json:"secrets,omitempty"`
	// Deps is the function's dependency layer (from its requirements.txt);
	// nil: none.
	Deps *Deps `json:"deps,omitempty"`
}

// Deps is what a function's requirements.txt asked for and the layer it
// was resolved into (package deps gives it meaning).
type Deps struct {
	Requested   []string `json:"requested"`    // requirements.txt's requirements, as given
	Resolved    []string `json:"resolved"`     // name==version --hash=sha256:... of every wheel
	Layer       string   `json:"layer"`        // the layer's digest (of Resolved and Format)
	LayerSHA256 string   `json:"layer_sha256"` // of its image
	LayerBytes  int64    `json:"layer_bytes"`
	Format      string   `json:"format"` // erofs or ext4
}

// Network is a function's egress policy (package vmnet gives it meaning).
type Network struct {
	Egress   string   `json:"egress"`
	Services []string `json:"services,omitempty"`
}

// VM states.
const (
	StateBooting = "booting"
	// StateStandby: a VMM started ahead of a restore, in the VMM pool; its
	// guest has not run.
	StateStandby = "standby"
	// StateReady: a ready clone, restored, resumed and warmed ahead of a
	// request; it has served none, and only a dispatch of its function
	// takes it.
	StateReady   = "ready"
	StateRunning = "running"
	StatePaused  = "paused"
	StateFailed  = "failed"
	StateStopped = "stopped"
)

// VM is a virtual machine thaw started.
type VM struct {
	ID        string    `json:"id"`
	Function  string    `json:"function"`
	State     string    `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	PID       int       `json:"pid,omitempty"`
	RunDir    string    `json:"run_dir"`
	Snapshot  string    `json:"snapshot,omitempty"` // restored from
	Strategy  string    `json:"strategy,omitempty"`
	Accel     string    `json:"accel"`
	MemoryMiB int       `json:"memory_mib"`
	BootMS    float64   `json:"boot_ms,omitempty"` // start to agent ready
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Version is the function version the VM runs (0: unversioned, -1: a
	// deploy's, not yet published).
	Version int `json:"version,omitempty"`
	// IdleUntil is set, in memory only, on a VM the keep-alive pool keeps
	// idle: when it is stopped unless an invocation takes it first.
	IdleUntil time.Time `json:"-"`
	// ReadyMiB is set, in memory only, on a ready clone waiting in the
	// pool: the MiB it counts against the standby memory.
	ReadyMiB int `json:"-"`
}

// Live reports whether the VM's process is supposed to be running.
func (v *VM) Live() bool {
	return v.State == StateBooting || v.State == StateStandby || v.State == StateReady || v.State == StateRunning || v.State == StatePaused
}

// Snapshot is a published snapshot directory.
type Snapshot struct {
	ID        string    `json:"id"`
	Function  string    `json:"function"`
	SourceVM  string    `json:"source_vm"`
	Dir       string    `json:"dir"`
	MemoryMiB int       `json:"memory_mib"`
	SizeBytes int64     `json:"size_bytes"` // apparent size of all files
	DiskBytes int64     `json:"disk_bytes"` // allocated (memory is sparse)
	Stamp     string    `json:"-"`          // memory file stamp at last full verification (JSON)
	CreateMS  float64   `json:"create_ms"`  // pause to published
	PauseMS   float64   `json:"pause_ms"`   // VM paused time during the snapshot
	CreatedAt time.Time `json:"created_at"`
	// Parent is the clean snapshot a warm snapshot was recorded from.
	Parent string `json:"parent,omitempty"`
	// Pinned snapshots are never garbage collected.
	Pinned bool `json:"pinned,omitempty"`
	// Prepared holds the prepare result (JSON) when the snapshot carries
	// strategy artifacts.
	Prepared json.RawMessage `json:"prepared,omitempty"`
	// RemoteMemory: a lazy snapshot, its memory file a placeholder and
	// its pages in the registry (fetched on demand).
	RemoteMemory bool `json:"remote_memory,omitempty"`
	// Version is the function version the snapshot belongs to: 0 for a
	// snapshot made by hand (unversioned), -1 while a deploy that made it
	// has not published its version yet.
	Version int `json:"version,omitempty"`
}

// Invocation is a record of one invocation and its measurements.
type Invocation struct {
	ID        string          `json:"id"`
	Function  string          `json:"function"`
	VM        string          `json:"vm"`
	Snapshot  string          `json:"snapshot,omitempty"`
	Strategy  string          `json:"strategy,omitempty"`
	OK        bool            `json:"ok"`
	Detail    json.RawMessage `json:"detail"` // the API's invocation document
	CreatedAt time.Time       `json:"created_at"`
}

// DB is the catalog.
type DB struct{ db *sql.DB }

const schema = `
CREATE TABLE IF NOT EXISTS functions (
	name TEXT PRIMARY KEY, digest TEXT NOT NULL, code_dir TEXT NOT NULL, disk TEXT NOT NULL,
	memory_mib INTEGER NOT NULL, vcpus INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS vms (
	id TEXT PRIMARY KEY, function TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL,
	pid INTEGER NOT NULL, run_dir TEXT NOT NULL, snapshot TEXT NOT NULL, strategy TEXT NOT NULL,
	accel TEXT NOT NULL, memory_mib INTEGER NOT NULL, boot_ms REAL NOT NULL,
	created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
	id TEXT PRIMARY KEY, function TEXT NOT NULL, source_vm TEXT NOT NULL, dir TEXT NOT NULL,
	memory_mib INTEGER NOT NULL, size_bytes INTEGER NOT NULL, disk_bytes INTEGER NOT NULL,
	stamp TEXT NOT NULL, create_ms REAL NOT NULL, pause_ms REAL NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS invocations (
	id TEXT PRIMARY KEY, function TEXT NOT NULL, vm TEXT NOT NULL, snapshot TEXT NOT NULL,
	strategy TEXT NOT NULL, ok INTEGER NOT NULL, detail TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS invocations_function ON invocations(function, created_at);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
`

// migrations are additive schema changes, applied once each, in order.
var migrations = []string{
	`ALTER TABLE snapshots ADD COLUMN parent TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN prepared TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE functions ADD COLUMN network TEXT NOT NULL DEFAULT '{"egress":"none"}'`,
	`ALTER TABLE functions ADD COLUMN max_concurrency INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE functions ADD COLUMN keep_alive_s INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE snapshots ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE functions ADD COLUMN vmm_pool INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE functions ADD COLUMN vmm_pool_ttl_s INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE snapshots ADD COLUMN remote_memory INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE snapshots ADD COLUMN version INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE vms ADD COLUMN version INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE functions ADD COLUMN env TEXT NOT NULL DEFAULT '{}'`,
	`ALTER TABLE functions ADD COLUMN secrets TEXT NOT NULL DEFAULT '{}'`,
	`ALTER TABLE functions ADD COLUMN deps TEXT NOT NULL DEFAULT ''`,
}

func migrate(db *sql.DB) error {
	var version int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		return err
	}
	for i := version; i < len(migrations); i++ {
		if _, err := db.Exec(migrations[i]); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if _, err := db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, i+1)); err != nil {
			return err
		}
	}
	return nil
}

// Open opens (creating if needed) the catalog at path.
//
// The database runs in WAL mode with synchronous=NORMAL: a commit is in the
// WAL before the API answers, so a crash or restart of the daemon loses
// nothing it accepted; only a crash of the host OS or a power loss can drop
// the last commits. FULL would fsync on every commit, which on the
// development machines' disk added ~25 ms to every restore (two VM records
// are written before QEMU starts).
func Open(path string) (*DB, error) {
	u := url.URL{Scheme: "file", Path: path, OmitHost: true}
	db, err := sql.Open("sqlite", u.String()+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(ON)")
	if err != nil {
		return nil, fmt.Errorf("open catalog %s: %w", path, err)
	}
	db.SetMaxOpenConns(1) // SQLite serializes writers; one connection avoids SQLITE_BUSY
	if _, err := db.Exec(schema + versionsSchema + adaptiveSchema + logsSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog schema %s: %w", path, err)
	}
	if err := migrate(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog schema %s: %w", path, err)
	}
	return &DB{db: db}, nil
}

// Close closes the database.
func (c *DB) Close() error { return c.db.Close() }

// tsLayout is fixed-width so that text order is time order (RFC3339Nano
// drops trailing zeros, and "…:00Z" would sort after "…:00.5Z").
const tsLayout = "2006-01-02T15:04:05.000000000Z07:00"

func ts(t time.Time) string { return t.UTC().Format(tsLayout) }

func parseTS(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func isUnique(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint")
}

// scanner is a row to scan: *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

// queryOne scans the row query returns with scan; no row is ErrNotFound
// for what key.
func queryOne[T any](ctx context.Context, db *sql.DB, scan func(scanner) (*T, error), what, key, query string, args ...any) (*T, error) {
	v, err := scan(db.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %q: %w", what, key, ErrNotFound)
	}
	return v, err
}

// queryText is the one text column of the row query returns; no row is
// notFound ("" and no error when notFound is nil).
func queryText(ctx context.Context, db *sql.DB, notFound error, query string, args ...any) (string, error) {
	var s string
	err := db.QueryRowContext(ctx, query, args...).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound
	}
	return s, err
}

// queryAll scans every row query returns with scan.
func queryAll[T any](ctx context.Context, db *sql.DB, scan func(scanner) (*T, error), query string, args ...any) ([]*T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// execOne runs a statement that must change a row; none is ErrNotFound
// for what key.
func (c *DB) execOne(ctx context.Context, what, key, query string, args ...any) error {
	res, err := c.db.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s %q: %w", what, key, ErrNotFound)
	}
	return nil
}

// PutFunction inserts a function; ErrExists if the name is taken.
func (c *DB) PutFunction(ctx context.Context, f *Function) error {
	return putFunction(ctx, c.db, f, false)
}

// putFunction inserts a function, or replaces the one of its name.
func putFunction(ctx context.Context, q execer, f *Function, replace bool) error {
	netw, err := json.Marshal(f.Network)
	if err != nil {
		return err
	}
	env, err := jsonMap(f.Env)
	if err != nil {
		return err
	}
	refs, err := jsonMap(f.Secrets)
	if err != nil {
		return err
	}
	verb := "INSERT"
	if replace {
		verb = "INSERT OR REPLACE"
	}
	deps := []byte{}
	if f.Deps != nil {
		if deps, err = json.Marshal(f.Deps); err != nil {
			return err
		}
	}
	_, err = q.ExecContext(ctx, verb+` INTO functions (`+functionCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		f.Name, f.Digest, f.CodeDir, f.Disk, f.MemoryMiB, f.VCPUs, ts(f.CreatedAt), string(netw), f.MaxConcurrency, f.KeepAliveS,
		f.VMMPool, f.VMMPoolTTLS, env, refs, string(deps))
	if isUnique(err) {
		return fmt.Errorf("function %q: %w", f.Name, ErrExists)
	}
	return err
}

const functionCols = `name, digest, code_dir, disk, memory_mib, vcpus, created_at, network, max_concurrency, keep_alive_s, vmm_pool, vmm_pool_ttl_s, env, secrets, deps`

func scanFunction(s scanner) (*Function, error) {
	var f Function
	var created, netw, env, refs, deps string
	if err := s.Scan(&f.Name, &f.Digest, &f.CodeDir, &f.Disk, &f.MemoryMiB, &f.VCPUs, &created, &netw, &f.MaxConcurrency, &f.KeepAliveS,
		&f.VMMPool, &f.VMMPoolTTLS, &env, &refs, &deps); err != nil {
		return nil, err
	}
	f.CreatedAt = parseTS(created)
	if err := json.Unmarshal([]byte(netw), &f.Network); err != nil {
		return nil, fmt.Errorf("function %s: network policy: %w", f.Name, err)
	}
	if err := json.Unmarshal([]byte(env), &f.Env); err != nil {
		return nil, fmt.Errorf("function %s: environment: %w", f.Name, err)
	}
	if err := json.Unmarshal([]byte(refs), &f.Secrets); err != nil {
		return nil, fmt.Errorf("function %s: secret references: %w", f.Name, err)
	}
	if len(f.Env) == 0 {
		f.Env = nil
	}
	if len(f.Secrets) == 0 {
		f.Secrets = nil
	}
	if deps != "" {
		f.Deps = &Deps{}
		if err := json.Unmarshal([]byte(deps), f.Deps); err != nil {
			return nil, fmt.Errorf("function %s: dependencies: %w", f.Name, err)
		}
	}
	return &f, nil
}

// jsonMap is m as the catalog stores it ({} for none).
func jsonMap(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// GetFunction returns a function by name.
func (c *DB) GetFunction(ctx context.Context, name string) (*Function, error) {
	return queryOne(ctx, c.db, scanFunction, "function", name, `SELECT `+functionCols+` FROM functions WHERE name=?`, name)
}

// ListFunctions returns every function by name.
func (c *DB) ListFunctions(ctx context.Context) ([]*Function, error) {
	return queryAll(ctx, c.db, scanFunction, `SELECT `+functionCols+` FROM functions ORDER BY name`)
}

// DeleteFunction removes a function record.
func (c *DB) DeleteFunction(ctx context.Context, name string) error {
	return c.deleteRow(ctx, "functions", "name", name, "function")
}

func (c *DB) deleteRow(ctx context.Context, table, key, val, what string) error {
	return c.execOne(ctx, what, val, `DELETE FROM `+table+` WHERE `+key+`=?`, val)
}

// PutVM inserts or replaces a VM record.
func (c *DB) PutVM(ctx context.Context, v *VM) error {
	v.UpdatedAt = time.Now()
	_, err := c.db.ExecContext(ctx, `INSERT OR REPLACE INTO vms (`+vmCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		v.ID, v.Function, v.State, v.Reason, v.PID, v.RunDir, v.Snapshot, v.Strategy, v.Accel,
		v.MemoryMiB, v.BootMS, ts(v.CreatedAt), ts(v.UpdatedAt), v.Version)
	return err
}

const vmCols = `id, function, state, reason, pid, run_dir, snapshot, strategy, accel, memory_mib, boot_ms, created_at, updated_at, version`

func scanVM(s scanner) (*VM, error) {
	var v VM
	var created, updated string
	if err := s.Scan(&v.ID, &v.Function, &v.State, &v.Reason, &v.PID, &v.RunDir, &v.Snapshot, &v.Strategy,
		&v.Accel, &v.MemoryMiB, &v.BootMS, &created, &updated, &v.Version); err != nil {
		return nil, err
	}
	v.CreatedAt, v.UpdatedAt = parseTS(created), parseTS(updated)
	return &v, nil
}

// GetVM returns a VM by id.
func (c *DB) GetVM(ctx context.Context, id string) (*VM, error) {
	return queryOne(ctx, c.db, scanVM, "vm", id, `SELECT `+vmCols+` FROM vms WHERE id=?`, id)
}

// ListVMs returns every VM, oldest first.
func (c *DB) ListVMs(ctx context.Context) ([]*VM, error) {
	return queryAll(ctx, c.db, scanVM, `SELECT `+vmCols+` FROM vms ORDER BY created_at, id`)
}

// DeleteVM removes a VM record.
func (c *DB) DeleteVM(ctx context.Context, id string) error {
	return c.deleteRow(ctx, "vms", "id", id, "vm")
}

// PutSnapshot inserts or replaces a snapshot record.
func (c *DB) PutSnapshot(ctx context.Context, s *Snapshot) error {
	_, err := c.db.ExecContext(ctx, `INSERT OR REPLACE INTO snapshots (`+snapCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		s.ID, s.Function, s.SourceVM, s.Dir, s.MemoryMiB, s.SizeBytes, s.DiskBytes, s.Stamp,
		s.CreateMS, s.PauseMS, ts(s.CreatedAt), s.Parent, string(s.Prepared), s.Pinned, s.RemoteMemory, s.Version)
	return err
}

const snapCols = `id, function, source_vm, dir, memory_mib, size_bytes, disk_bytes, stamp, create_ms, pause_ms, created_at, parent, prepared, pinned, remote_memory, version`

func scanSnapshot(s scanner) (*Snapshot, error) {
	var sn Snapshot
	var created, prepared string
	if err := s.Scan(&sn.ID, &sn.Function, &sn.SourceVM, &sn.Dir, &sn.MemoryMiB, &sn.SizeBytes,
		&sn.DiskBytes, &sn.Stamp, &sn.CreateMS, &sn.PauseMS, &created, &sn.Parent, &prepared, &sn.Pinned, &sn.RemoteMemory, &sn.Version); err != nil {
		return nil, err
	}
	sn.CreatedAt = parseTS(created)
	if prepared != "" {
		sn.Prepared = json.RawMessage(prepared)
	}
	return &sn, nil
}

// GetSnapshot returns a snapshot by id.
func (c *DB) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return queryOne(ctx, c.db, scanSnapshot, "snapshot", id, `SELECT `+snapCols+` FROM snapshots WHERE id=?`, id)
}

// ListSnapshots returns snapshots, oldest first; function filters if set.
func (c *DB) ListSnapshots(ctx context.Context, function string) ([]*Snapshot, error) {
	return queryAll(ctx, c.db, scanSnapshot, `SELECT `+snapCols+` FROM snapshots WHERE ?='' OR function=? ORDER BY created_at, id`, function, function)
}

// SetSnapshotPinned pins a snapshot (garbage collection keeps it) or
// unpins it.
func (c *DB) SetSnapshotPinned(ctx context.Context, id string, pinned bool) error {
	return c.execOne(ctx, "snapshot", id, `UPDATE snapshots SET pinned=? WHERE id=?`, pinned, id)
}

// SetSnapshotParent records the clean snapshot a warm one came from.
func (c *DB) SetSnapshotParent(ctx context.Context, id, parent string) error {
	return c.updateSnapshot(ctx, id, `parent`, parent)
}

// SetSnapshotPrepared records a snapshot's prepare result.
func (c *DB) SetSnapshotPrepared(ctx context.Context, id, prepared string) error {
	return c.updateSnapshot(ctx, id, `prepared`, prepared)
}

func (c *DB) updateSnapshot(ctx context.Context, id, col, val string) error {
	return c.execOne(ctx, "snapshot", id, `UPDATE snapshots SET `+col+`=? WHERE id=?`, val, id)
}

// DeleteSnapshot removes a snapshot record.
func (c *DB) DeleteSnapshot(ctx context.Context, id string) error {
	return c.deleteRow(ctx, "snapshots", "id", id, "snapshot")
}

// PutInvocation records an invocation.
func (c *DB) PutInvocation(ctx context.Context, inv *Invocation) error {
	ok := 0
	if inv.OK {
		ok = 1
	}
	_, err := c.db.ExecContext(ctx, `INSERT INTO invocations VALUES (?,?,?,?,?,?,?,?)`,
		inv.ID, inv.Function, inv.VM, inv.Snapshot, inv.Strategy, ok, string(inv.Detail), ts(inv.CreatedAt))
	return err
}

// PruneInvocations keeps the invocation history bounded: it deletes the
// records older than before (if set) and all but the newest keep (if
// positive), and says how many went.
func (c *DB) PruneInvocations(ctx context.Context, keep int, before time.Time) (int64, error) {
	var n int64
	if !before.IsZero() {
		res, err := c.db.ExecContext(ctx, `DELETE FROM invocations WHERE created_at < ?`, ts(before))
		if err != nil {
			return 0, err
		}
		k, _ := res.RowsAffected()
		n += k
	}
	if keep > 0 {
		res, err := c.db.ExecContext(ctx, `DELETE FROM invocations WHERE id IN
			(SELECT id FROM invocations ORDER BY created_at DESC LIMIT -1 OFFSET ?)`, keep)
		if err != nil {
			return n, err
		}
		k, _ := res.RowsAffected()
		n += k
	}
	return n, nil
}

// ListInvocations returns the newest invocations first, up to limit;
// function filters if set.
// Set, before and beforeID are a cursor: only records created before
// it (same time: smaller id) are listed.
func (c *DB) ListInvocations(ctx context.Context, function string, limit int, before time.Time, beforeID string) ([]*Invocation, error) {
	cut := "~" // after every timestamp: no cursor
	if !before.IsZero() {
		cut = ts(before)
	}
	return queryAll(ctx, c.db, scanInvocation, `SELECT id, function, vm, snapshot, strategy, ok, detail, created_at
		FROM invocations WHERE (?='' OR function=?) AND (created_at < ? OR (created_at = ? AND id < ?))
		ORDER BY created_at DESC, id DESC LIMIT ?`, function, function, cut, cut, beforeID, limit)
}

func scanInvocation(s scanner) (*Invocation, error) {
	var inv Invocation
	var ok int
	var detail, created string
	if err := s.Scan(&inv.ID, &inv.Function, &inv.VM, &inv.Snapshot, &inv.Strategy, &ok, &detail, &created); err != nil {
		return nil, err
	}
	inv.OK = ok == 1
	inv.Detail = json.RawMessage(detail)
	inv.CreatedAt = parseTS(created)
	return &inv, nil
}

// Setting returns a stored setting ("" if unset).
func (c *DB) Setting(ctx context.Context, key string) (string, error) {
	return queryText(ctx, c.db, nil, `SELECT value FROM settings WHERE key=?`, key)
}

// SetSetting stores a setting.
func (c *DB) SetSetting(ctx context.Context, key, value string) error {
	_, err := c.db.ExecContext(ctx, `INSERT OR REPLACE INTO settings VALUES (?,?)`, key, value)
	return err
}
