package api

import (
	"net/http"
	"sync/atomic"

	"github.com/thaw-dev/thaw/wire"
)

// State is whether the handler serves: a daemon answers health checks
// while it starts and while it drains, so a load balancer sends it
// requests only in between.
type State int32

const (
	// Serving: every route is served and GET /v1/health is 200 (the
	// default of a new handler).
	Serving State = iota
	// Starting: the daemon is not ready; GET /v1/health is 503 and every
	// other route 503 unavailable.
	Starting
	// Draining: the daemon is stopping; GET /v1/health is 503 so that
	// balancers stop sending requests, and the requests that still come
	// are served.
	Draining
)

func (s State) String() string {
	switch s {
	case Starting:
		return wire.HealthStarting
	case Draining:
		return wire.HealthDraining
	}
	return wire.HealthOK
}

// NodeHeader names the daemon's node (Options.NodeName) on every answer,
// so a client behind a load balancer sees which node served it.
const NodeHeader = "Thaw-Node"

// healthPattern is the one route the guard lets through without a token
// or an allowed Host: it tells nothing but the daemon's state and node.
const healthPattern = "GET /v1/health"

// codeUnavailable: the daemon is starting (503).
const codeUnavailable = "unavailable"

// state holds a handler's State.
type state struct{ v atomic.Int32 }

func (s *state) get() State  { return State(s.v.Load()) }
func (s *state) set(v State) { s.v.Store(int32(v)) }

// SetState changes what the handler serves (see State).
func (h *Handler) SetState(s State) { h.state.set(s) }

// health is GET /v1/health: 200 while serving, 503 while starting or
// draining, the body saying which.
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	st := h.state.get()
	status := http.StatusOK
	if st != Serving {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, wire.Health{Status: st.String(), Node: h.opts.NodeName})
}

// ValidNodeName: 1-63 letters, digits, '.', '_' or '-', fit for a header
// and a load balancer's server name.
func ValidNodeName(n string) bool {
	if n == "" || len(n) > 63 {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
