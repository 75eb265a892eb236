// Package objstoretest is the conformance suite of objstore.Store: every
// implementation runs it from its own tests,
//
//	func TestConformance(t *testing.T) {
//		objstoretest.Run(t, func(t *testing.T) objstore.Store { return openEmpty(t) })
//	}
//
// where open returns a new, empty, initialized store that t cleans up.
// Each subtest opens its own.
package objstoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// Run runs every conformance test on stores open makes.
func Run(t *testing.T, open func(t *testing.T) objstore.Store) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, objstore.Store)
	}{
		{"PutGet", testPutGet},
		{"Overwrite", testOverwrite},
		{"Empty", testEmpty},
		{"Missing", testMissing},
		{"Range", testRange},
		{"Limit", testLimit},
		{"Large", testLarge},
		{"IfAbsent", testIfAbsent},
		{"IfMatch", testIfMatch},
		{"IfAbsentRace", testIfAbsentRace},
		{"IfMatchRace", testIfMatchRace},
		{"List", testList},
		{"ListPrefix", testListPrefix},
		{"ListStop", testListStop},
		{"Delete", testDelete},
		{"ConcurrentWriters", testConcurrentWriters},
		{"InvalidKeys", testInvalidKeys},
		{"Ping", testPing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

// ctx is every call's context, bounded so a hung store fails the test.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func put(t *testing.T, s objstore.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(ctx(t), key, data, objstore.PutOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, s objstore.Store, key string, opts objstore.GetOptions) ([]byte, objstore.Info) {
	t.Helper()
	b, info, err := s.Get(ctx(t), key, opts)
	if err != nil {
		t.Fatalf("get %s %+v: %v", key, opts, err)
	}
	return b, info
}

func stat(t *testing.T, s objstore.Store, key string) objstore.Info {
	t.Helper()
	info, err := s.Stat(ctx(t), key)
	if err != nil {
		t.Fatalf("stat %s: %v", key, err)
	}
	return info
}

func random(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// near says whether a store's modification time is the local clock's at
// about the same moment (stores keep whole seconds).
func near(mod, at time.Time) bool {
	return mod.After(at.Add(-2*time.Second)) && mod.Before(at.Add(2*time.Second))
}

func testPutGet(t *testing.T, s objstore.Store) {
	data := random(t, 1000)
	before := time.Now()
	put(t, s, "a/b/c.bin", data)
	b, info := get(t, s, "a/b/c.bin", objstore.GetOptions{})
	if !bytes.Equal(b, data) {
		t.Fatalf("read %d bytes, not the %d written", len(b), len(data))
	}
	st := stat(t, s, "a/b/c.bin")
	if info.Key != "a/b/c.bin" || info.Size != 1000 || st.Size != 1000 || st.Key != "a/b/c.bin" {
		t.Fatalf("get info %+v, stat %+v: want key a/b/c.bin, size 1000", info, st)
	}
	if info.ETag == "" || info.ETag != st.ETag {
		t.Fatalf("etag %q from get, %q from stat: want one, the same", info.ETag, st.ETag)
	}
	if !near(st.ModTime, before) {
		t.Fatalf("modified %s, written at %s", st.ModTime, before)
	}
	buf := make([]byte, 0, 4096)
	b, _ = get(t, s, "a/b/c.bin", objstore.GetOptions{Buf: buf})
	if !bytes.Equal(b, data) || &b[0] != &buf[:1][0] {
		t.Fatalf("a buffer large enough was not used (or the bytes differ)")
	}
}

func testOverwrite(t *testing.T, s objstore.Store) {
	put(t, s, "k", []byte("first"))
	first := stat(t, s, "k")
	put(t, s, "k", []byte("second, longer"))
	b, info := get(t, s, "k", objstore.GetOptions{})
	if string(b) != "second, longer" || info.Size != int64(len(b)) {
		t.Fatalf("read %q (size %d) after the overwrite", b, info.Size)
	}
	if info.ETag == first.ETag {
		t.Fatalf("etag %q unchanged by a put of other bytes", info.ETag)
	}
}

func testEmpty(t *testing.T, s objstore.Store) {
	put(t, s, "empty", nil)
	b, info := get(t, s, "empty", objstore.GetOptions{})
	if len(b) != 0 || info.Size != 0 {
		t.Fatalf("empty object read as %d bytes, size %d", len(b), info.Size)
	}
	if b, _ := get(t, s, "empty", objstore.GetOptions{Offset: 0, Length: 10}); len(b) != 0 {
		t.Fatalf("a range of the empty object read %d bytes", len(b))
	}
	if st := stat(t, s, "empty"); st.Size != 0 {
		t.Fatalf("stat size %d", st.Size)
	}
	n := 0
	for o, err := range s.List(ctx(t), "") {
		if err != nil {
			t.Fatal(err)
		}
		if o.Key != "empty" || o.Size != 0 {
			t.Fatalf("listed %+v", o)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("listed %d objects, want the empty one", n)
	}
}

func testMissing(t *testing.T, s objstore.Store) {
	if _, _, err := s.Get(ctx(t), "no/such", objstore.GetOptions{}); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get of a missing key: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Get(ctx(t), "no/such", objstore.GetOptions{Offset: 5, Length: 5}); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("ranged get of a missing key: %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(ctx(t), "no/such"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat of a missing key: %v, want ErrNotFound", err)
	}
	put(t, s, "dir/obj", []byte("x"))
	if _, err := s.Stat(ctx(t), "dir"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat of a key's prefix: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx(t), "no/such", "neither"); err != nil {
		t.Fatalf("delete of missing keys: %v", err)
	}
	for o, err := range s.List(ctx(t), "nothing/") {
		t.Fatalf("listing an empty prefix yielded %+v, %v", o, err)
	}
}

func testRange(t *testing.T, s objstore.Store) {
	data := random(t, 100)
	put(t, s, "r", data)
	for _, c := range []struct {
		off, n int64
		want   []byte
	}{
		{0, 1, data[:1]},
		{10, 20, data[10:30]},
		{90, 0, data[90:]},
		{90, 50, data[90:]}, // cut at the end
		{99, 1, data[99:]},
		{100, 0, nil}, // at the end
		{100, 5, nil},
		{250, 5, nil}, // past the end
	} {
		b, info := get(t, s, "r", objstore.GetOptions{Offset: c.off, Length: c.n})
		if !bytes.Equal(b, c.want) {
			t.Errorf("range %d+%d: %d bytes, want %d", c.off, c.n, len(b), len(c.want))
		}
		if info.Size != 100 {
			t.Errorf("range %d+%d: info size %d, want the object's 100", c.off, c.n, info.Size)
		}
	}
	if _, _, err := s.Get(ctx(t), "r", objstore.GetOptions{Offset: -1}); err == nil {
		t.Error("a negative offset was accepted")
	}
}

func testLimit(t *testing.T, s objstore.Store) {
	put(t, s, "l", random(t, 100))
	if _, _, err := s.Get(ctx(t), "l", objstore.GetOptions{Limit: 99}); !errors.Is(err, objstore.ErrTooLarge) {
		t.Fatalf("limit 99 of 100 bytes: %v, want ErrTooLarge", err)
	}
	if b, _ := get(t, s, "l", objstore.GetOptions{Limit: 100}); len(b) != 100 {
		t.Fatalf("limit 100 read %d bytes", len(b))
	}
	if b, _ := get(t, s, "l", objstore.GetOptions{Offset: 60, Limit: 40}); len(b) != 40 {
		t.Fatalf("the last 40 bytes with limit 40 read %d", len(b))
	}
	if _, _, err := s.Get(ctx(t), "l", objstore.GetOptions{Offset: 50, Limit: 40}); !errors.Is(err, objstore.ErrTooLarge) {
		t.Fatalf("50 bytes with limit 40: %v, want ErrTooLarge", err)
	}
}

func testLarge(t *testing.T, s objstore.Store) {
	data := random(t, 9<<20+12345)
	put(t, s, "big", data)
	b, info := get(t, s, "big", objstore.GetOptions{})
	if !bytes.Equal(b, data) || info.Size != int64(len(data)) {
		t.Fatalf("large object: read %d bytes (size %d) of %d, or they differ", len(b), info.Size, len(data))
	}
	tail, _ := get(t, s, "big", objstore.GetOptions{Offset: int64(len(data)) - 4096, Length: 8192})
	if !bytes.Equal(tail, data[len(data)-4096:]) {
		t.Fatalf("the large object's last 4096 bytes differ (%d read)", len(tail))
	}
}
