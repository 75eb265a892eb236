package restore

import (
	"errors"
	"fmt"
)

// ErrFallbackRefused: a strict restore (Env.Strict) whose strategy could
// not begin and would have run as vanilla.
var ErrFallbackRefused = errors.New("fallback refused")

// FallbackRefusedError says which strategy could not restore which
// snapshot, and why; it is ErrFallbackRefused.
type FallbackRefusedError struct {
	Kind     Kind
	Snapshot string
	Cause    error
}

func (e *FallbackRefusedError) Error() string {
	return fmt.Sprintf("%s cannot restore %s and would fall back to vanilla: %v", e.Kind, e.Snapshot, e.Cause)
}

// Is makes the error ErrFallbackRefused.
func (e *FallbackRefusedError) Is(target error) bool { return target == ErrFallbackRefused }

// Unwrap returns the strategy's own error.
func (e *FallbackRefusedError) Unwrap() error { return e.Cause }
