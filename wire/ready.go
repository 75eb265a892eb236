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
	// TakeMS is the request received to the clone in hand: the request's
	// checks, the catalog's reads, the take (hits only; part of TotalMS).
	TakeMS float64 `json:"take_ms,omitempty"`
	// RenewGuestMS is the guest agent's part of RenewMS, and RenewSteps
	// where it went (ms per step, as the agent reports them; hits only).
	RenewGuestMS float64            `json:"renew_guest_ms,omitempty"`
	RenewSteps   map[string]float64 `json:"renew_steps,omitempty"`
	// Fallback says why no ready clone served it (misses only): "none
	// ready", or the ready clone that failed and why; the invocation was
	// then served as it would have been without ready clones.
	Fallback string `json:"fallback,omitempty"`
}
