package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// warmUpEvent is the warm-up invocation's event: an object, as most events
// are, so that its decoding and the result's encoding take the paths a
// request's do.
var warmUpEvent = json.RawMessage(`{"thaw":"warm-up"}`)

// WarmUp runs no-op requests through the agent so that TCG has translated
// its request paths before a request comes (a ready clone): a ping, and an
// invocation of the built-in warm-up function (WarmUpFunction), which runs
// the whole invoke and result path without the function's code (once: a
// second run measured no faster hit). An agent before ReadyProtocol
// refuses that function before any handler runs, having taken the invoke
// request's path up to there. No handler of the function runs.
func (c *Conn) WarmUp(ctx context.Context) error {
	if _, err := c.Ping(ctx); err != nil {
		return err
	}
	if c.Protocol() < ReadyProtocol {
		r, err := c.Invoke(ctx, WarmUpFunction, nil)
		switch {
		case err != nil:
			return err
		case r.OK || r.Error == nil || r.Error.Type != "FunctionNotFound":
			return fmt.Errorf("the agent did not refuse the warm-up invocation: %+v", r.Error)
		}
		return nil
	}
	r, err := c.Invoke(ctx, WarmUpFunction, warmUpEvent)
	switch {
	case err != nil:
		return err
	case !r.OK || !bytes.Equal(r.Result, warmUpEvent):
		return fmt.Errorf("the warm-up invocation failed: %+v, result %.100q", r.Error, r.Result)
	}
	return nil
}
