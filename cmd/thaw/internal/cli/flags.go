package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/fnconfig"
)

// RestoreFlags are a function's restore settings on the command line.
type RestoreFlags struct {
	strategy, refresh  string
	refreshFromTraffic bool
}

// Add defines the restore flags in fl.
func (r *RestoreFlags) Add(fl *pflag.FlagSet) {
	fl.StringVar(&r.strategy, "strategy", "", "how cold starts that name no strategy restore: auto (thaw chooses from the function's own measurements) or a strategy; default: the daemon's")
	fl.StringVar(&r.refresh, "refresh", "", "when recorded working sets that drifted from the inputs are recorded again: prepare (with the prepare's input), traffic or off; default: the daemon's")
	fl.BoolVar(&r.refreshFromTraffic, "refresh-from-traffic", false, "record drifted working sets again with the invocation that showed the drift (used once, never stored): --refresh traffic")
}

// Settings are the flags as the API's settings (nil: not given).
func (r *RestoreFlags) Settings() (client.RestoreSettings, error) {
	var s client.RestoreSettings
	if r.refreshFromTraffic {
		if r.refresh != "" && r.refresh != "traffic" {
			return s, Usagef("--refresh-from-traffic is --refresh traffic, not --refresh %s", r.refresh)
		}
		r.refresh = "traffic"
	}
	if r.strategy != "" {
		s.Strategy = &r.strategy
	}
	if r.refresh != "" {
		s.Refresh = &r.refresh
	}
	return s, nil
}

// Options are the flags as function options.
func (r *RestoreFlags) Options() ([]client.FunctionOption, error) {
	s, err := r.Settings()
	if err != nil {
		return nil, err
	}
	var o []client.FunctionOption
	if s.Strategy != nil {
		o = append(o, client.WithStrategy(*s.Strategy))
	}
	if s.Refresh != nil {
		o = append(o, client.WithRefresh(*s.Refresh))
	}
	return o, nil
}

// EventFlags are --event and --event-file.
type EventFlags struct{ event, file string }

// Add defines the flags of cmd; what is the event's name in their help.
func (e *EventFlags) Add(cmd *cobra.Command, what string) {
	fl := cmd.Flags()
	fl.StringVarP(&e.event, "event", "e", "", what+", as JSON (default {})")
	fl.StringVar(&e.file, "event-file", "", "read "+what+" from this JSON file ('-': standard input)")
}

// Read returns the event from --event or --event-file, checked to be
// JSON; {} if neither is set.
func (e *EventFlags) Read(a *App, cmd *cobra.Command) (json.RawMessage, error) {
	var (
		b    []byte
		what string
	)
	file := e.file
	switch {
	case cmd.Flags().Changed("event"):
		b, what = []byte(e.event), "--event"
	case file == "-":
		var err error
		if b, err = io.ReadAll(a.Stdin); err != nil {
			return nil, fmt.Errorf("read the event from standard input: %w", err)
		}
		what = "the event on standard input"
	case file != "":
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return nil, Usagef("--event-file: %v", err)
		}
		what = "the event in " + file
	default:
		return json.RawMessage(`{}`), nil
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, Usagef("%s is empty; give a JSON value, such as {}", what)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, Usagef("%s is not valid JSON: %v (at byte %d)", what, err, se.Offset)
		}
		return nil, Usagef("%s is not valid JSON: %v", what, err)
	}
	return json.RawMessage(b), nil
}

// Assignments parses repeated NAME=VALUE flags into a map; a name given
// twice or an item without '=' is a usage error.
func Assignments(flag string, items []string) (map[string]string, error) {
	m, err := fnconfig.Assignments(items)
	if err != nil {
		return nil, Usagef("--%s %v", flag, err)
	}
	return m, nil
}

// FunctionFlags are the flags of a function's spec: thaw function
// create's, and thaw deploy's.
type FunctionFlags struct {
	Dir        string
	Memory     int
	VCPUs      int
	ServerDir  bool
	Allow      []string
	Egress     string
	MaxConc    int
	KeepAlive  int
	VMMPool    int
	VMMPoolTTL int
	Env        []string
	Secrets    []string
	Restore    RestoreFlags
}
