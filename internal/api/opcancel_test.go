package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
)

// POST /v1/operations/{id}/cancel stops a running boot and answers the
// operation, failed with 499 canceled naming the canceling request; a
// second cancel is a conflict, and the client's errors keep the daemon's
// request id.
func TestAPICancelOperation(t *testing.T) {
	_, b, srv, c := fakeDaemon(t)
	release := b.HoldReady()
	defer release()
	ctx := context.Background()
	op, err := c.StartBootVM(ctx, "echo")
	if err != nil {
		t.Fatal(err)
	}
	resp, body := send(t, srv, "POST", "/v1/operations/"+op.ID+"/cancel", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	got := decodeOp(t, body)
	rid := resp.Header.Get(RequestIDHeader)
	if got.State != "failed" || got.Error == nil || got.Error.Status != 499 || got.Error.Code != "canceled" ||
		!strings.Contains(got.Error.Message, "operation canceled (request "+rid+")") {
		t.Fatalf("canceled operation: %s", body)
	}
	if _, err := c.WaitOperation(ctx, op.ID, nil); !errors.Is(err, client.ErrServer) {
		t.Errorf("waiting for a canceled operation: %v", err)
	}
	_, err = c.CancelOperation(ctx, op.ID)
	var ae *client.APIError
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrConflict) || ae.Code != "conflict" || !strings.HasPrefix(ae.RequestID, "req-") {
		t.Fatalf("second cancel: %v (%+v)", err, ae)
	}
	if _, err := c.CancelOperation(ctx, "op-000000000000"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown operation: %v", err)
	}
}
