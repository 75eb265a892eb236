package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/completion"
	"github.com/thaw-dev/thaw/internal/restore"
)

// completionDaemon answers the list requests completion makes; /v1/info
// offers the strategies of package restore's registry, as thawd does.
func completionDaemon(t *testing.T) *httptest.Server {
	t.Helper()
	strategies, _ := json.Marshal(restore.Kinds())
	answer := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, body)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/info", answer(`{"version": "0.1.0", "strategies": `+string(strategies)+`}`))
	mux.Handle("GET /v1/functions", answer(functionsJSON))
	mux.Handle("GET /v1/vms", answer(vmsJSON))
	mux.Handle("GET /v1/snapshots", answer(`{"items": [
	  {"id": "snap-1", "function": "hello", "dir": "/d/snap-1", "created_at": "2025-01-02T03:04:05Z"},
	  {"id": "snap-2", "function": "big", "dir": "/d/snap-2", "created_at": "2025-01-03T03:04:05Z"}]}`))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// complete runs thaw's hidden __complete command against url and returns
// the candidates (without descriptions) and the directive line.
func complete(t *testing.T, url string, args ...string) (values []string, directive string) {
	t.Helper()
	var out, errb bytes.Buffer
	all := append([]string{"--url", url, cobra.ShellCompRequestCmd}, args...)
	if code := execute(context.Background(), all, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("thaw %v: exit %d: %s", all, code, errb.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.HasPrefix(l, ":") {
			directive = l
			continue
		}
		v, _, _ := strings.Cut(l, "\t")
		values = append(values, v)
	}
	return values, directive
}

func TestCompletion(t *testing.T) {
	srv := completionDaemon(t)
	var kinds []string
	for _, k := range restore.Kinds() {
		kinds = append(kinds, string(k))
	}
	noFiles := ":4" // cobra.ShellCompDirectiveNoFileComp
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"invoke", ""}, []string{"hello", "big"}},
		{[]string{"vm", "boot", ""}, []string{"hello", "big"}},
		{[]string{"prepare", "h"}, []string{"hello", "big"}}, // the shell filters by prefix
		{[]string{"function", "delete", ""}, []string{"hello", "big"}},
		{[]string{"invoke", "hello", ""}, nil}, // one argument only
		{[]string{"vm", "get", ""}, []string{"vm-run", "vm-bad"}},
		{[]string{"vm", "delete", "vm-run", ""}, []string{"vm-bad"}}, // the ones named already are left out
		{[]string{"snapshot", "create", ""}, []string{"vm-run", "vm-bad"}},
		{[]string{"vm", "restore", ""}, []string{"snap-1", "snap-2"}},
		{[]string{"snapshot", "delete", "snap-2", ""}, []string{"snap-1"}},
		{[]string{"snapshot", "verify", ""}, []string{"snap-1", "snap-2"}},
		{[]string{"invoke", "hello", "--snapshot", ""}, []string{"snap-1", "snap-2"}},
		{[]string{"invoke", "hello", "--vm", ""}, []string{"vm-run", "vm-bad"}},
		{[]string{"invoke", "hello", "--strategy", ""}, kinds},
		{[]string{"vm", "restore", "snap-1", "-s", ""}, kinds},
		{[]string{"invocations", "--function", ""}, []string{"hello", "big"}},
		{[]string{"snapshot", "list", "-f", ""}, []string{"hello", "big"}},
		{[]string{"bench", "eval", "--strategies", ""}, kinds},
	} {
		got, dir := complete(t, srv.URL, c.args...)
		if !slices.Equal(got, c.want) || dir != noFiles {
			t.Errorf("%v: %v %s, want %v %s", c.args, got, dir, c.want, noFiles)
		}
	}
	if !slices.Contains(kinds, "snapbpf") || !slices.Contains(kinds, "vanilla") {
		t.Fatalf("the registry lacks strategies: %v", kinds)
	}

	// Descriptions say what each candidate is.
	var out bytes.Buffer
	execute(context.Background(), []string{"--url", srv.URL, cobra.ShellCompRequestCmd, "vm", "get", ""}, strings.NewReader(""), &out, io.Discard)
	wantContains(t, "vm completions", out.String(), "vm-run\thello, running")

	// A comma list completes its last element.
	got, dir := complete(t, srv.URL, "bench", "eval", "--strategies", "vanilla,")
	if len(got) != len(kinds) || got[0] != "vanilla,"+kinds[0] || dir != ":6" {
		t.Errorf("--strategies vanilla,: %v %s", got, dir)
	}
}

// TestCompletionWithoutDaemon: an unreachable or silent daemon gives no
// candidates, quietly and soon.
func TestCompletionWithoutDaemon(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	if got, _ := complete(t, gone.URL, "invoke", ""); len(got) != 0 {
		t.Errorf("unreachable daemon: %v", got)
	}
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer silent.Close()
	start := time.Now()
	var out, errb bytes.Buffer
	code := execute(context.Background(), []string{"--url", silent.URL, cobra.ShellCompRequestCmd, "vm", "get", ""}, strings.NewReader(""), &out, &errb)
	if took := time.Since(start); code != 0 || took > completion.Timeout+2*time.Second {
		t.Errorf("silent daemon: exit %d after %s", code, took)
	}
	if strings.Contains(out.String(), "vm-") || strings.Contains(errb.String(), "thaw:") {
		t.Errorf("silent daemon: stdout %q, stderr %q", out.String(), errb.String())
	}
	if got, _ := complete(t, "unix:/nonexistent/thawd.sock", "snapshot", "get", ""); len(got) != 0 {
		t.Errorf("missing socket: %v", got)
	}
}

// TestCompletionCommands: every command the completion table names
// exists, so a renamed command cannot silently lose its completion.
func TestCompletionCommands(t *testing.T) {
	root := newRootCmd(&cli.App{})
	for _, path := range completion.ArgCommands() {
		cmd, rest, err := root.Find(strings.Fields(path)[1:])
		if err != nil || len(rest) > 0 || cmd.CommandPath() != path || cmd.ValidArgsFunction == nil {
			t.Errorf("%s: no such command with completion (%v, %v)", path, err, rest)
		}
	}
}

// TestCompletionScripts: thaw completion writes scripts for the packaged
// shells.
func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_thaw", "zsh": "#compdef thaw", "fish": "complete -c thaw"} {
		var out, errb bytes.Buffer
		if code := execute(context.Background(), []string{"completion", shell}, strings.NewReader(""), &out, &errb); code != 0 || !strings.Contains(out.String(), want) {
			t.Errorf("completion %s: exit %d, no %q (%s)", shell, code, want, errb.String())
		}
	}
}
