package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Interruption is the cause of a run's context when a signal ended it.
type Interruption struct{ Sig syscall.Signal }

func (i *Interruption) Error() string { return fmt.Sprintf("interrupted by %s", i.Sig) }

// SignalContext is a context that SIGINT (Ctrl-C) or SIGTERM cancels, its
// cause the signal. After the first signal thaw no longer catches them: a
// second Ctrl-C ends it at once.
func SignalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		s, ok := <-ch
		if !ok {
			return
		}
		signal.Stop(ch)
		if sig, isSys := s.(syscall.Signal); isSys {
			cancel(&Interruption{Sig: sig})
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
	}
}

// interruptedBy says whether a signal ended ctx, and its number.
func interruptedBy(ctx context.Context) (int, bool) {
	var i *Interruption
	if errors.As(context.Cause(ctx), &i) {
		return int(i.Sig), true
	}
	return 0, false
}
