package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Version is an immutable, numbered build of a function: its code,
// dependencies and configuration (Config, a frozen copy of the function as
// deployed) and what its snapshots were made from (Inputs). Its snapshots
// carry its number; unversioned snapshots (made by hand) carry 0.
type Version struct {
	Function string `json:"function"`
	Number   int    `json:"number"`
	// Digest identifies the content: code, dependencies, configuration,
	// guest image, kernel and machine. A deploy of the same content
	// returns the version that has it.
	Digest string   `json:"digest"`
	Config Function `json:"config"`
	// Inputs is what the version's snapshot was made from (a JSON
	// document the daemon defines), to tell when it went stale.
	Inputs json.RawMessage `json:"inputs,omitempty"`
	// Collected: its snapshots were deleted by retention; the record stays
	// as history and cannot be invoked until deployed again.
	Collected bool `json:"collected,omitempty"`
	// RecordEvent is the record input of a version deployed with prepare
	// (its snapshots are made again the same way); nil: not prepared.
	RecordEvent json.RawMessage `json:"record_event,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
}

// Alias names versions of a function, with a weight each (package
// versions says what routings are valid).
type Alias struct {
	Function string `json:"function"`
	Name     string `json:"name"`
	// Routing is a JSON array of {"version","weight"}.
	Routing json.RawMessage `json:"routing"`
	// History lists the alias's earlier primary versions, oldest first
	// (bounded), for rollback.
	History   []int     `json:"history,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// MaxAliasHistory bounds an alias's remembered earlier versions.
const MaxAliasHistory = 32

const versionsSchema = `
CREATE TABLE IF NOT EXISTS versions (
	function TEXT NOT NULL, number INTEGER NOT NULL, digest TEXT NOT NULL, config TEXT NOT NULL,
	inputs TEXT NOT NULL, collected INTEGER NOT NULL, created_at TEXT NOT NULL, record_event TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (function, number));
CREATE INDEX IF NOT EXISTS versions_digest ON versions(function, digest);
CREATE TABLE IF NOT EXISTS aliases (
	function TEXT NOT NULL, name TEXT NOT NULL, routing TEXT NOT NULL, history TEXT NOT NULL,
	updated_at TEXT NOT NULL, PRIMARY KEY (function, name));
`

const versionCols = `function, number, digest, config, inputs, collected, created_at, record_event`

func scanVersion(s scanner) (*Version, error) {
	var v Version
	var config, inputs, created, record string
	if err := s.Scan(&v.Function, &v.Number, &v.Digest, &config, &inputs, &v.Collected, &created, &record); err != nil {
		return nil, err
	}
	if record != "" {
		v.RecordEvent = json.RawMessage(record)
	}
	if err := json.Unmarshal([]byte(config), &v.Config); err != nil {
		return nil, fmt.Errorf("version %s:%d: config: %w", v.Function, v.Number, err)
	}
	if inputs != "" {
		v.Inputs = json.RawMessage(inputs)
	}
	v.CreatedAt = parseTS(created)
	return &v, nil
}

// GetVersion returns version number of function.
func (c *DB) GetVersion(ctx context.Context, function string, number int) (*Version, error) {
	return queryOne(ctx, c.db, scanVersion, "version", fmt.Sprintf("%s:%d", function, number),
		`SELECT `+versionCols+` FROM versions WHERE function=? AND number=?`, function, number)
}

// VersionByDigest returns function's version with content digest.
func (c *DB) VersionByDigest(ctx context.Context, function, digest string) (*Version, error) {
	return queryOne(ctx, c.db, scanVersion, "version of "+function+" with digest", digest,
		`SELECT `+versionCols+` FROM versions WHERE function=? AND digest=? ORDER BY number DESC LIMIT 1`, function, digest)
}

// ListVersions returns function's versions, oldest first (every
// function's if function is "").
func (c *DB) ListVersions(ctx context.Context, function string) ([]*Version, error) {
	return queryAll(ctx, c.db, scanVersion, `SELECT `+versionCols+` FROM versions WHERE ?='' OR function=? ORDER BY function, number`, function, function)
}

// SetVersionCollected marks a version's snapshots collected (or not).
func (c *DB) SetVersionCollected(ctx context.Context, function string, number int, collected bool) error {
	return c.execOne(ctx, "version", fmt.Sprintf("%s:%d", function, number),
		`UPDATE versions SET collected=? WHERE function=? AND number=?`, collected, function, number)
}

// SetVersionInputs records what a version's current snapshot was made from.
func (c *DB) SetVersionInputs(ctx context.Context, function string, number int, inputs json.RawMessage) error {
	return c.execOne(ctx, "version", fmt.Sprintf("%s:%d", function, number),
		`UPDATE versions SET inputs=? WHERE function=? AND number=?`, string(inputs), function, number)
}

// Publish is one deploy's outcome, entered at once.
type Publish struct {
	// Function is the function's new working configuration (created if
	// the function does not exist, replaced if it does).
	Function *Function
	Version  *Version // Number is assigned by PublishVersion
	// Snapshots are the deploy's snapshots (made with version -1, pending):
	// they get the new version's number.
	Snapshots []string
	// Promote moves these aliases (live, usually) to the new version alone.
	Promote []string
}

// PublishVersion enters a deploy in one transaction: the next version
// number of the function, the version, the function's configuration, the
// snapshots' version and the promoted aliases. A crash before it leaves
// nothing of the deploy in the catalog but pending snapshots (version -1),
// which the daemon removes at start.
func (c *DB) PublishVersion(ctx context.Context, p Publish) (*Version, error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	v := p.Version
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(number), 0) + 1 FROM versions WHERE function=?`, v.Function).Scan(&v.Number); err != nil {
		return nil, err
	}
	config, err := json.Marshal(v.Config)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO versions (`+versionCols+`) VALUES (?,?,?,?,?,?,?,?)`,
		v.Function, v.Number, v.Digest, string(config), string(v.Inputs), v.Collected, ts(v.CreatedAt), string(v.RecordEvent)); err != nil {
		return nil, err
	}
	if err := putFunction(ctx, tx, p.Function, true); err != nil {
		return nil, err
	}
	for _, id := range p.Snapshots {
		if _, err := tx.ExecContext(ctx, `UPDATE snapshots SET version=? WHERE id=?`, v.Number, id); err != nil {
			return nil, err
		}
	}
	for _, name := range p.Promote {
		routing, _ := json.Marshal([]map[string]int{{"version": v.Number, "weight": 100}})
		if _, err := routeAlias(ctx, tx, v.Function, name, routing); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return v, nil
}

// execer is a *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// remember pushes the alias's current primary version onto its history.
func (a *Alias) remember() {
	if len(a.Routing) == 0 {
		return
	}
	var routes []struct{ Version, Weight int }
	if json.Unmarshal(a.Routing, &routes) != nil || len(routes) == 0 {
		return
	}
	best := routes[0]
	for _, r := range routes[1:] {
		if r.Weight > best.Weight {
			best = r
		}
	}
	if n := len(a.History); n > 0 && a.History[n-1] == best.Version {
		return
	}
	a.History = append(a.History, best.Version)
	if len(a.History) > MaxAliasHistory {
		a.History = a.History[len(a.History)-MaxAliasHistory:]
	}
}

const aliasCols = `function, name, routing, history, updated_at`

func scanAlias(s scanner) (*Alias, error) {
	var a Alias
	var routing, history, updated string
	if err := s.Scan(&a.Function, &a.Name, &routing, &history, &updated); err != nil {
		return nil, err
	}
	a.Routing = json.RawMessage(routing)
	if err := json.Unmarshal([]byte(history), &a.History); err != nil {
		return nil, fmt.Errorf("alias %s:%s: history: %w", a.Function, a.Name, err)
	}
	a.UpdatedAt = parseTS(updated)
	return &a, nil
}

func getAlias(ctx context.Context, q execer, function, name string) (*Alias, error) {
	a, err := scanAlias(q.QueryRowContext(ctx, `SELECT `+aliasCols+` FROM aliases WHERE function=? AND name=?`, function, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("alias %q of %q: %w", name, function, ErrNotFound)
	}
	return a, err
}

// routeAlias points alias name of function at routing in q, creating it
// if needed and keeping its earlier primary version in its history.
func routeAlias(ctx context.Context, q execer, function, name string, routing json.RawMessage) (*Alias, error) {
	a, err := getAlias(ctx, q, function, name)
	if errors.Is(err, ErrNotFound) {
		a = &Alias{Function: function, Name: name}
	} else if err != nil {
		return nil, err
	}
	a.remember()
	a.Routing, a.UpdatedAt = routing, time.Now()
	if err := putAlias(ctx, q, a); err != nil {
		return nil, err
	}
	return a, nil
}

func putAlias(ctx context.Context, q execer, a *Alias) error {
	history, err := json.Marshal(a.History)
	if err != nil {
		return err
	}
	if a.History == nil {
		history = []byte("[]")
	}
	_, err = q.ExecContext(ctx, `INSERT OR REPLACE INTO aliases (`+aliasCols+`) VALUES (?,?,?,?,?)`,
		a.Function, a.Name, string(a.Routing), string(history), ts(a.UpdatedAt))
	return err
}

// GetAlias returns an alias of function.
func (c *DB) GetAlias(ctx context.Context, function, name string) (*Alias, error) {
	return getAlias(ctx, c.db, function, name)
}

// SetAlias points an alias at routing (a JSON array of routes), keeping
// its earlier primary version in its history; it creates the alias if
// needed. Every version routed to must exist and not be collected.
func (c *DB) SetAlias(ctx context.Context, function, name string, routing json.RawMessage, versions []int) (*Alias, error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	for _, n := range versions {
		var collected bool
		err := tx.QueryRowContext(ctx, `SELECT collected FROM versions WHERE function=? AND number=?`, function, n).Scan(&collected)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("version %s:%d: %w", function, n, ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		if collected {
			return nil, fmt.Errorf("version %s:%d: %w", function, n, ErrCollected)
		}
	}
	a, err := routeAlias(ctx, tx, function, name, routing)
	if err != nil {
		return nil, err
	}
	return a, tx.Commit()
}

// ErrCollected: the version's snapshots were collected by retention.
var ErrCollected = errors.New("collected")

// ListAliases returns function's aliases by name (every function's if
// function is "").
func (c *DB) ListAliases(ctx context.Context, function string) ([]*Alias, error) {
	return queryAll(ctx, c.db, scanAlias, `SELECT `+aliasCols+` FROM aliases WHERE ?='' OR function=? ORDER BY function, name`, function, function)
}

// DeleteAlias removes an alias.
func (c *DB) DeleteAlias(ctx context.Context, function, name string) error {
	return c.execOne(ctx, "alias", function+":"+name, `DELETE FROM aliases WHERE function=? AND name=?`, function, name)
}

// DeleteFunctionVersions removes a function's versions and aliases (the
// function is being deleted).
func (c *DB) DeleteFunctionVersions(ctx context.Context, function string) error {
	for _, q := range []string{`DELETE FROM aliases WHERE function=?`, `DELETE FROM versions WHERE function=?`} {
		if _, err := c.db.ExecContext(ctx, q, function); err != nil {
			return err
		}
	}
	return nil
}

// ImportVersion enters a version another node published, under its
// number, with the snapshots pulled for it, in one transaction; the live
// alias routes to it if the function has no live alias yet. The version
// already here with the same digest just gains the snapshots; with
// another digest it is ErrExists and nothing changes.
func (c *DB) ImportVersion(ctx context.Context, v *Version, snapshots []string, live string) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	old, err := scanVersion(tx.QueryRowContext(ctx, `SELECT `+versionCols+` FROM versions WHERE function=? AND number=?`, v.Function, v.Number))
	switch {
	case err == nil && old.Digest != v.Digest:
		return fmt.Errorf("%w: version %s:%d here has other content", ErrExists, v.Function, v.Number)
	case errors.Is(err, sql.ErrNoRows) || errors.Is(err, ErrNotFound):
		config, err := json.Marshal(v.Config)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO versions (`+versionCols+`) VALUES (?,?,?,?,?,?,?,?)`,
			v.Function, v.Number, v.Digest, string(config), string(v.Inputs), false, ts(v.CreatedAt), string(v.RecordEvent)); err != nil {
			return err
		}
	case err != nil:
		return err
	case old.Collected:
		if _, err := tx.ExecContext(ctx, `UPDATE versions SET collected=0 WHERE function=? AND number=?`, v.Function, v.Number); err != nil {
			return err
		}
	}
	for _, id := range snapshots {
		if _, err := tx.ExecContext(ctx, `UPDATE snapshots SET version=? WHERE id=?`, v.Number, id); err != nil {
			return err
		}
	}
	if live != "" {
		if _, err := getAlias(ctx, tx, v.Function, live); errors.Is(err, ErrNotFound) {
			routing, _ := json.Marshal([]map[string]int{{"version": v.Number, "weight": 100}})
			if err := putAlias(ctx, tx, &Alias{Function: v.Function, Name: live, Routing: routing, UpdatedAt: time.Now()}); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
	}
	return tx.Commit()
}
