package objstoretest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// listKeys lists prefix, checking every entry's size and time against
// what Stat says.
func listKeys(t *testing.T, s objstore.Store, prefix string) []string {
	t.Helper()
	var keys []string
	for o, err := range s.List(ctx(t), prefix) {
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		st := stat(t, s, o.Key)
		if o.Size != st.Size || !o.ModTime.Truncate(time.Second).Equal(st.ModTime.Truncate(time.Second)) {
			t.Fatalf("listed %s as %d bytes at %s; stat says %d at %s", o.Key, o.Size, o.ModTime, st.Size, st.ModTime)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// layout is a set of keys whose byte order differs from a directory
// walk's ("p/b-d" sorts before "p/b/c").
var layout = []string{"p/bz", "p/b/c", "q/x", "p/a", "p/b-d", "p/b/e/f", "pq"}

func testList(t *testing.T, s objstore.Store) {
	for i, k := range layout {
		put(t, s, k, []byte(strings.Repeat("x", i)))
	}
	want := slices.Clone(layout)
	slices.Sort(want)
	if got := listKeys(t, s, ""); !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q (byte order)", got, want)
	}
	for o, err := range s.List(ctx(t), "p/b/e/") {
		if err != nil || o.Key != "p/b/e/f" || o.Size != 5 {
			t.Fatalf("listed %+v, %v; want p/b/e/f of 5 bytes", o, err)
		}
	}
}

func testListPrefix(t *testing.T, s objstore.Store) {
	for _, k := range layout {
		put(t, s, k, []byte("x"))
	}
	for prefix, want := range map[string][]string{
		"p/b":     {"p/b-d", "p/b/c", "p/b/e/f", "p/bz"},
		"p/b/":    {"p/b/c", "p/b/e/f"},
		"p":       {"p/a", "p/b-d", "p/b/c", "p/b/e/f", "p/bz", "pq"},
		"p/":      {"p/a", "p/b-d", "p/b/c", "p/b/e/f", "p/bz"},
		"q/x":     {"q/x"},
		"q/xy":    nil,
		"p/b/c/":  nil,
		"nothing": nil,
	} {
		if got := listKeys(t, s, prefix); !slices.Equal(got, want) {
			t.Errorf("list %q: %q, want %q", prefix, got, want)
		}
	}
}

func testListStop(t *testing.T, s objstore.Store) {
	for _, k := range layout {
		put(t, s, k, []byte("x"))
	}
	n := 0
	for _, err := range s.List(ctx(t), "") {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 {
			break
		}
	}
	if got := listKeys(t, s, "q/"); !slices.Equal(got, []string{"q/x"}) {
		t.Fatalf("after a stopped listing: %q", got)
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	for _, k := range layout {
		put(t, s, k, []byte("x"))
	}
	if err := s.Delete(ctx(t), "p/b/c", "p/b/e/f", "p/missing", "pq"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	want := []string{"p/a", "p/b-d", "p/bz", "q/x"}
	if got := listKeys(t, s, ""); !slices.Equal(got, want) {
		t.Fatalf("after delete: %q, want %q", got, want)
	}
	if _, err := s.Stat(ctx(t), "p/b/c"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat of a deleted key: %v", err)
	}
	// A key under a prefix whose last object went is written again.
	put(t, s, "p/b/e/f", []byte("again"))
	if b, _ := get(t, s, "p/b/e/f", objstore.GetOptions{}); string(b) != "again" {
		t.Fatalf("read %q after writing a deleted key again", b)
	}
	if err := s.Delete(ctx(t)); err != nil {
		t.Fatalf("delete of no keys: %v", err)
	}
}

// hostile are keys every store refuses.
var hostile = []string{"", "/etc/passwd", "../escape", "a/../../escape", "a/..", "./a", "a//b", "a/./b", "a/", "a\x00b",
	`a\..\b`, "\xff\xfe", strings.Repeat("k", objstore.MaxKeyLen+1)}

func testInvalidKeys(t *testing.T, s objstore.Store) {
	for _, k := range hostile {
		if err := s.Put(ctx(t), k, []byte("x"), objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("put %q: %v, want ErrInvalidKey", k, err)
		}
		if _, _, err := s.Get(ctx(t), k, objstore.GetOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("get %q: %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Stat(ctx(t), k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("stat %q: %v, want ErrInvalidKey", k, err)
		}
		if err := s.Delete(ctx(t), "fine", k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("delete %q: %v, want ErrInvalidKey", k, err)
		}
	}
	if got := listKeys(t, s, ""); len(got) != 0 {
		t.Fatalf("refused keys left objects: %q", got)
	}
}

func testPing(t *testing.T, s objstore.Store) {
	if err := s.Ping(ctx(t)); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := s.Init(ctx(t)); err != nil {
		t.Fatalf("init of an initialized store: %v", err)
	}
	if s.String() == "" {
		t.Fatal("the store does not say where it is")
	}
}
