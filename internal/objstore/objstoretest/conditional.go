package objstoretest

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/thaw-dev/thaw/internal/objstore"
)

func testIfAbsent(t *testing.T, s objstore.Store) {
	if err := s.Put(ctx(t), "once", []byte("first"), objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatalf("put if absent of a new key: %v", err)
	}
	err := s.Put(ctx(t), "once", []byte("second"), objstore.PutOptions{IfAbsent: true})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("put if absent of a present key: %v, want ErrPrecondition", err)
	}
	if b, _ := get(t, s, "once", objstore.GetOptions{}); string(b) != "first" {
		t.Fatalf("a refused put changed the object to %q", b)
	}
	if err := s.Put(ctx(t), "once", []byte("x"), objstore.PutOptions{IfAbsent: true, IfMatch: "x"}); err == nil {
		t.Fatal("IfAbsent with IfMatch was accepted")
	}
	// Refused puts leave nothing behind in listings.
	n := 0
	for _, err := range s.List(ctx(t), "") {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d objects listed after refused puts, want 1", n)
	}
}

func testIfMatch(t *testing.T, s objstore.Store) {
	err := s.Put(ctx(t), "v", []byte("x"), objstore.PutOptions{IfMatch: "anything"})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("put if match of a missing key: %v, want ErrPrecondition", err)
	}
	if _, err := s.Stat(ctx(t), "v"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a refused put created the object (%v)", err)
	}
	put(t, s, "v", []byte("one"))
	one := stat(t, s, "v")
	if err := s.Put(ctx(t), "v", []byte("two"), objstore.PutOptions{IfMatch: one.ETag}); err != nil {
		t.Fatalf("put if match of the current etag: %v", err)
	}
	err = s.Put(ctx(t), "v", []byte("three"), objstore.PutOptions{IfMatch: one.ETag})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("put if match of a replaced etag: %v, want ErrPrecondition", err)
	}
	if b, _ := get(t, s, "v", objstore.GetOptions{}); string(b) != "two" {
		t.Fatalf("object is %q, want two", b)
	}
}

// testIfAbsentRace: of writers creating one key at once, exactly one
// succeeds and the object holds its bytes whole.
func testIfAbsentRace(t *testing.T, s objstore.Store) {
	const writers = 8
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			data := bytes.Repeat([]byte{byte('a' + i)}, 64<<10)
			errs[i] = s.Put(ctx(t), "race/key", data, objstore.PutOptions{IfAbsent: true})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both created the key", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, objstore.ErrPrecondition):
			t.Fatalf("writer %d: %v, want ErrPrecondition", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer created the key")
	}
	b, _ := get(t, s, "race/key", objstore.GetOptions{})
	if !bytes.Equal(b, bytes.Repeat([]byte{byte('a' + winner)}, 64<<10)) {
		t.Fatalf("the object is not the winner's bytes (%d bytes)", len(b))
	}
}

// testIfMatchRace: writers incrementing one counter with read, then put
// if unchanged, lose no increment.
func testIfMatchRace(t *testing.T, s objstore.Store) {
	const writers, each = 4, 5
	put(t, s, "counter", []byte("0"))
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for range each {
				if err := increment(t, s); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if b, _ := get(t, s, "counter", objstore.GetOptions{}); string(b) != strconv.Itoa(writers*each) {
		t.Fatalf("counter %s after %d increments", b, writers*each)
	}
}

func increment(t *testing.T, s objstore.Store) error {
	for range 1000 {
		b, info, err := s.Get(ctx(t), "counter", objstore.GetOptions{})
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(string(b))
		if err != nil {
			return fmt.Errorf("counter %q: %w", b, err)
		}
		err = s.Put(ctx(t), "counter", []byte(strconv.Itoa(n+1)), objstore.PutOptions{IfMatch: info.ETag})
		if !errors.Is(err, objstore.ErrPrecondition) {
			return err
		}
	}
	return errors.New("increment: 1000 conflicts in a row")
}

// testConcurrentWriters: readers of a key being replaced see one
// writer's bytes whole, never a mix or a part; writers of distinct keys
// do not disturb each other.
func testConcurrentWriters(t *testing.T, s objstore.Store) {
	const writers, rounds, size = 4, 5, 256 << 10
	put(t, s, "shared", bytes.Repeat([]byte{'0'}, size))
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, writers+1)
	for i := range writers {
		wg.Go(func() {
			for r := range rounds {
				data := bytes.Repeat([]byte{byte('a' + i)}, size)
				if err := s.Put(ctx(t), "shared", data, objstore.PutOptions{}); err != nil {
					errs <- err
					return
				}
				own := fmt.Sprintf("own/%d/%d", i, r)
				if err := s.Put(ctx(t), own, data[:r+1], objstore.PutOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var rg sync.WaitGroup
	rg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			b, _, err := s.Get(ctx(t), "shared", objstore.GetOptions{})
			if err == nil && (len(b) != size || !bytes.Equal(b, bytes.Repeat(b[:1], size))) {
				err = fmt.Errorf("read a torn object: %d bytes", len(b))
			}
			if err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(done)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range writers {
		for r := range rounds {
			if b, _ := get(t, s, fmt.Sprintf("own/%d/%d", i, r), objstore.GetOptions{}); len(b) != r+1 || b[0] != byte('a'+i) {
				t.Fatalf("own/%d/%d holds %q", i, r, b)
			}
		}
	}
}
