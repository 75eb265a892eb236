package daemon

import "context"

// Caller is who sent a request, as the API established it. Over the Unix
// socket UID, GID and PID come from the kernel (SO_PEERCRED); over TCP the
// caller is only known to hold the token.
type Caller struct {
	Unix bool   `json:"unix"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	PID  int32  `json:"pid"`
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries; ok is false when none was set
// (in-process use, tests).
func CallerFrom(ctx context.Context) (c Caller, ok bool) {
	c, ok = ctx.Value(callerKey{}).(Caller)
	return c, ok
}
