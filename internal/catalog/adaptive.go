package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// RestoreSettings are how a function's cold starts choose their restore
// strategy and whether its working sets are refreshed.
type RestoreSettings struct {
	Function string `json:"function"`
	// FunctionCreated is the function's CreatedAt: settings of an earlier
	// function of the same name do not apply.
	FunctionCreated time.Time `json:"function_created"`
	// Strategy is "auto" or a strategy's name; "": the daemon's default.
	Strategy string `json:"strategy"`
	// Refresh is when working sets are recorded again: "prepare" (with
	// the prepare's input), "traffic" (with the invocation that showed the
	// drift, used once and never stored) or "off"; "": the daemon's
	// default.
	Refresh string `json:"refresh"`
}

const adaptiveSchema = `
CREATE TABLE IF NOT EXISTS restore_settings (
	function TEXT PRIMARY KEY, function_created TEXT NOT NULL, strategy TEXT NOT NULL, refresh TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS restore_state (
	function TEXT NOT NULL, version INTEGER NOT NULL, state TEXT NOT NULL, updated_at TEXT NOT NULL,
	PRIMARY KEY (function, version));
CREATE TABLE IF NOT EXISTS prepare_events (snapshot TEXT PRIMARY KEY, event TEXT NOT NULL);
`

// RestoreSettings returns a function's settings; ErrNotFound if it has none.
func (c *DB) RestoreSettings(ctx context.Context, function string) (*RestoreSettings, error) {
	var r RestoreSettings
	var created string
	err := c.db.QueryRowContext(ctx, `SELECT function, function_created, strategy, refresh
		FROM restore_settings WHERE function = ?`, function).Scan(&r.Function, &created, &r.Strategy, &r.Refresh)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("restore settings of %q: %w", function, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	r.FunctionCreated = parseTS(created)
	return &r, nil
}

// PutRestoreSettings sets a function's settings.
func (c *DB) PutRestoreSettings(ctx context.Context, r *RestoreSettings) error {
	_, err := c.db.ExecContext(ctx, `INSERT OR REPLACE INTO restore_settings
		(function, function_created, strategy, refresh) VALUES (?, ?, ?, ?)`,
		r.Function, ts(r.FunctionCreated), r.Strategy, r.Refresh)
	return err
}

// RestoreState returns the adaptive restore state of a function version
// (a JSON document the daemon defines); ErrNotFound if there is none.
func (c *DB) RestoreState(ctx context.Context, function string, version int) ([]byte, error) {
	state, err := queryText(ctx, c.db, fmt.Errorf("restore state of %s:%d: %w", function, version, ErrNotFound),
		`SELECT state FROM restore_state WHERE function = ? AND version = ?`, function, version)
	if err != nil {
		return nil, err
	}
	return []byte(state), nil
}

// RestoreStates returns every version's state of a function, by version.
func (c *DB) RestoreStates(ctx context.Context, function string) (map[int][]byte, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT version, state FROM restore_state WHERE function = ? ORDER BY version`, function)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int][]byte{}
	for rows.Next() {
		var v int
		var state string
		if err := rows.Scan(&v, &state); err != nil {
			return nil, err
		}
		out[v] = []byte(state)
	}
	return out, rows.Err()
}

// PutRestoreState writes a function version's state.
func (c *DB) PutRestoreState(ctx context.Context, function string, version int, state []byte) error {
	_, err := c.db.ExecContext(ctx, `INSERT OR REPLACE INTO restore_state (function, version, state, updated_at) VALUES (?, ?, ?, ?)`,
		function, version, string(state), ts(time.Now()))
	return err
}

// PutPrepareEvent keeps the record input a snapshot's artifacts were
// recorded with (working-set refreshes record with it again).
func (c *DB) PutPrepareEvent(ctx context.Context, snapshot string, event []byte) error {
	_, err := c.db.ExecContext(ctx, `INSERT OR REPLACE INTO prepare_events (snapshot, event) VALUES (?, ?)`, snapshot, string(event))
	return err
}

// PrepareEvent returns a snapshot's record input; ErrNotFound if none is
// kept.
func (c *DB) PrepareEvent(ctx context.Context, snapshot string) ([]byte, error) {
	ev, err := queryText(ctx, c.db, fmt.Errorf("record input of %s: %w", snapshot, ErrNotFound),
		`SELECT event FROM prepare_events WHERE snapshot = ?`, snapshot)
	if err != nil {
		return nil, err
	}
	return []byte(ev), nil
}

// PruneRestore removes the settings and states of functions and the
// record inputs of snapshots that no longer exist; it returns how many
// rows went.
func (c *DB) PruneRestore(ctx context.Context) (int64, error) {
	var n int64
	for _, q := range []string{
		`DELETE FROM restore_settings WHERE function NOT IN (SELECT name FROM functions)`,
		`DELETE FROM restore_state WHERE function NOT IN (SELECT name FROM functions)`,
		`DELETE FROM prepare_events WHERE snapshot NOT IN (SELECT id FROM snapshots)`,
	} {
		res, err := c.db.ExecContext(ctx, q)
		if err != nil {
			return n, err
		}
		k, _ := res.RowsAffected()
		n += k
	}
	return n, nil
}
