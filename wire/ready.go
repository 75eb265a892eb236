package wire

// ReadyNote says how a ready clone served an invocation, or why none did.
// A ready clone is a VM restored from the function version's snapshot,
// resumed and its agent's request path warmed ahead of the request, that
// has served no request; it is renewed (clock, entropy, secrets,
// on_restore) at dispatch and then runs the event.
type ReadyNote struct {
	// Hit: a ready clone served the invocation (mode "ready").
	Hit bool `json:"hit"`
	// WaitedMS is how long the clone waited ready before this request
	// took it (hits only).
	WaitedMS float64 `json:"waited_ms,omitempty"`
	// RenewMS is the renewal at dispatch, request sent to answer (hits
	// only; part of TotalMS).
	RenewMS float64 `json:"renew_ms,omitempty"`
	// Fallback says why no ready clone served it (misses only): "none
	// ready", or the ready clone that failed and why; the invocation was
	// then served as it would have been without ready clones.
	Fallback string `json:"fallback,omitempty"`
}
