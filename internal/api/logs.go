package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// logRoutes are a function's logs.
func (h *Handler) logRoutes() []route {
	return []route{{"GET", "/v1/functions/{name}/logs", h.functionLogs}}
}

// functionLogs serves GET /v1/functions/{name}/logs: the function's log
// lines after ?after, oldest first; with ?wait_s and none there yet, the
// request waits for new ones (a follower's long poll).
func (h *Handler) functionLogs(w http.ResponseWriter, r *http.Request) {
	req, err := readLogsRequest(r, time.Now())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	page, err := h.svc.FunctionLogs(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	items := page.Lines
	if items == nil {
		items = []wire.LogLine{}
	}
	writeJSON(w, http.StatusOK, wire.LogPage{Items: items, Next: logCursor(page.Next), More: page.More})
}

// readLogsRequest reads the query of GET /v1/functions/{name}/logs:
// since (an RFC 3339 time, or a duration before now such as 10m), after
// (a page's next), invocation, limit (lines) and wait_s.
func readLogsRequest(r *http.Request, now time.Time) (daemon.LogsRequest, error) {
	q := r.URL.Query()
	req := daemon.LogsRequest{Function: r.PathValue("name"), Invocation: q.Get("invocation")}
	if err := daemon.ValidName(req.Function); err != nil {
		return req, err
	}
	var err error
	if req.Since, err = parseSince(q.Get("since"), now); err != nil {
		return req, err
	}
	if c := q.Get("after"); c != "" {
		if req.After, err = parseLogCursor(c); err != nil {
			return req, err
		}
	}
	if req.Limit, err = intParam(q.Get("limit")); err != nil {
		return req, err
	}
	wait, err := intParam(q.Get("wait_s"))
	if err != nil {
		return req, err
	}
	if wait < 0 || time.Duration(wait)*time.Second > daemon.MaxLogWait {
		return req, fmt.Errorf("%w: wait_s %d: want 0 to %d", daemon.ErrInvalid, wait, int(daemon.MaxLogWait.Seconds()))
	}
	req.Wait = time.Duration(wait) * time.Second
	return req, nil
}

// parseSince reads since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%w: since %q: want a time (RFC 3339, such as 2026-11-27T10:00:00Z) or a duration before now (such as 10m or 2h)", daemon.ErrInvalid, s)
	}
	return now.Add(-d), nil
}

// logCursor is a log position as a page's next: "seq:line", base64.
func logCursor(p daemon.LogPosition) string {
	return cursor(fmt.Sprintf("%d:%d", p.Seq, p.Line))
}

func parseLogCursor(c string) (daemon.LogPosition, error) {
	bad := fmt.Errorf("%w: after %q is not a position this API gave", daemon.ErrInvalid, c)
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return daemon.LogPosition{}, bad
	}
	seq, line, ok := strings.Cut(string(b), ":")
	s, err1 := strconv.ParseInt(seq, 10, 64)
	l, err2 := strconv.Atoi(line)
	if !ok || err1 != nil || err2 != nil || s < 0 || l < 0 {
		return daemon.LogPosition{}, bad
	}
	return daemon.LogPosition{Seq: s, Line: l}, nil
}

// withLogs is inv as answered: its logs only if the request asked for
// them (logs: true; the history keeps them either way).
func withLogs(inv *daemon.Invocation, want bool) *daemon.Invocation {
	if inv != nil && !want {
		inv.Logs = nil
	}
	return inv
}
