package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// Dead letters: outcomes on the dead-letter subject, read, replayed and
// purged by the operator (thaw dlq).

// dlqFilter is the dead-letter subject of function ("": every function).
func dlqFilter(function string) (string, error) {
	if function == "" {
		return dlqSubject + "*", nil
	}
	if err := daemon.ValidName(function); err != nil {
		return "", err
	}
	return dlqSubject + function, nil
}

// ListDeadLetters lists dead letters oldest first, of one function or
// all, from sequence after+1, at most limit.
func (t *Triggers) ListDeadLetters(ctx context.Context, function string, after uint64, limit int) ([]wire.DeadLetter, error) {
	filter, err := dlqFilter(function)
	if err != nil {
		return nil, err
	}
	st, err := t.e.js.Stream(ctx, dlqStream)
	if err != nil {
		return nil, fmt.Errorf("%w: dead letters: %v", ErrEngine, err)
	}
	var out []wire.DeadLetter
	for seq := after + 1; len(out) < limit; {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if isNotFound(err) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("%w: dead letter %d: %v", ErrEngine, seq, err)
		}
		dl, err := deadLetterOf(raw)
		if err != nil {
			t.log.Warn("dead letter is malformed; skipped", "seq", raw.Sequence, "err", err)
		} else {
			out = append(out, *dl)
		}
		seq = raw.Sequence + 1
	}
	return out, nil
}

func deadLetterOf(raw *jetstream.RawStreamMsg) (*wire.DeadLetter, error) {
	dl := &wire.DeadLetter{Seq: raw.Sequence, Stored: raw.Time.UTC()}
	if err := json.Unmarshal(raw.Data, &dl.Outcome); err != nil {
		return nil, err
	}
	return dl, nil
}

// GetDeadLetter finds the newest dead letter of an asynchronous
// invocation.
func (t *Triggers) GetDeadLetter(ctx context.Context, id string) (*wire.DeadLetter, error) {
	if !asyncIDRE.MatchString(id) {
		return nil, fmt.Errorf("%w: asynchronous invocation id %q is malformed", ErrInvalid, truncate(id, 60))
	}
	var found *wire.DeadLetter
	var after uint64
	for {
		page, err := t.ListDeadLetters(ctx, "", after, 500)
		if err != nil {
			return nil, err
		}
		for i := range page {
			if page[i].Outcome.ID == id {
				found = &page[i]
			}
		}
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].Seq
	}
	if found == nil {
		return nil, fmt.Errorf("%w: no dead letter of %s", ErrNotFound, id)
	}
	return found, nil
}

// ReplayDeadLetter queues a dead letter's event again as a new
// asynchronous invocation (attempts start over) and removes the dead
// letter.
func (t *Triggers) ReplayDeadLetter(ctx context.Context, id string) (*wire.AsyncAccepted, error) {
	dl, err := t.GetDeadLetter(ctx, id)
	if err != nil {
		return nil, err
	}
	acc, err := t.Enqueue(ctx, EnqueueRequest{Function: dl.Outcome.Function, Event: dl.Outcome.Event, Schedule: dl.Outcome.Schedule})
	if err != nil {
		return nil, err
	}
	if err := t.deleteDeadLetter(ctx, dl.Seq); err != nil {
		return acc, err
	}
	t.log.Info("dead letter replayed", "id", id, "new_id", acc.ID, "function", dl.Outcome.Function)
	return acc, nil
}

func (t *Triggers) deleteDeadLetter(ctx context.Context, seq uint64) error {
	st, err := t.e.js.Stream(ctx, dlqStream)
	if err == nil {
		err = st.DeleteMsg(ctx, seq)
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("%w: delete dead letter %d: %v", ErrEngine, seq, err)
	}
	return nil
}

// PurgeDeadLetters removes the dead letters of one function, or all; it
// answers how many it removed.
func (t *Triggers) PurgeDeadLetters(ctx context.Context, function string) (uint64, error) {
	filter, err := dlqFilter(function)
	if err != nil {
		return 0, err
	}
	st, err := t.e.js.Stream(ctx, dlqStream)
	if err != nil {
		return 0, fmt.Errorf("%w: dead letters: %v", ErrEngine, err)
	}
	before, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: dead letters: %v", ErrEngine, err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
		return 0, fmt.Errorf("%w: purge dead letters: %v", ErrEngine, err)
	}
	after, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: dead letters: %v", ErrEngine, err)
	}
	n := before.State.Msgs - min(after.State.Msgs, before.State.Msgs)
	t.log.Info("dead letters purged", "function", function, "count", n)
	return n, nil
}
