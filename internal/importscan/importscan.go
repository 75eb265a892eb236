// Package importscan finds what a function's module-level code does that a
// snapshot freezes: it draws random numbers or UUIDs, reads the clock or
// opens connections while the module is imported, which happens once, at
// boot, before the snapshot; every VM restored from the snapshot then
// starts with the same values and the same socket. It reads the code with
// Python's own parser (the host's python3, ast module) and never runs it.
package importscan

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"time"
)

//go:embed scan.py
var script string

// ErrUnavailable: the host has no python3 to read the code with.
var ErrUnavailable = errors.New("no python3 on the daemon's host to read the code with")

// Timeout bounds one scan.
const Timeout = 10 * time.Second

// Finding is one call in module-level code.
type Finding struct {
	File string `json:"file"` // relative to the function's directory
	Line int    `json:"line"`
	Call string `json:"call"` // as resolved through the module's imports: "random.random"
	Kind string `json:"kind"` // random, time or network
}

// why says what a kind of call at import means for the VMs restored from
// a snapshot, and where it belongs instead.
var why = map[string]string{
	"random":  "its value is drawn once, at boot, and every VM restored from a snapshot starts with the same; draw it in handle() or on_restore()",
	"time":    "it reads the clock once, at boot: every VM restored from a snapshot sees the time the snapshot was taken; read it in handle()",
	"network": "a connection opened at boot is one socket, frozen in the snapshot and shared by every VM restored from it (the peer sees one connection); open it in on_restore() or handle()",
}

// String is the finding as a warning for the function's author.
func (f Finding) String() string {
	return fmt.Sprintf("%s:%d: %s() runs at import: %s", f.File, f.Line, f.Call, why[f.Kind])
}

// Scan reads the Python files at the top of dir (a function's directory:
// handler.py and the modules beside it, not packages below it) and returns
// the calls their module-level code makes that a snapshot freezes. A file
// that does not parse is skipped (the import reports it).
func Scan(ctx context.Context, dir string) ([]Finding, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	// -I: isolated (no user site, no PYTHON* variables, not the cwd on
	// the path), -S: no site module; the code is parsed, never imported.
	cmd := exec.CommandContext(ctx, py, "-I", "-S", "-c", script, dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("import scan: %w: %.300s", err, stderr.String())
	}
	var found []Finding
	if err := json.Unmarshal(out, &found); err != nil {
		return nil, fmt.Errorf("import scan: %w", err)
	}
	return found, nil
}
