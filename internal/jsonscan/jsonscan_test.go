package jsonscan

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

var valid = []string{
	`0`, `-0`, `1`, `-12.5e+3`, `1E-2`, `0.0`, `123456789012345678901234567890`,
	`true`, `false`, `null`, `""`, `"a"`, `"\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00"`,
	"\"\u00e9\u20ac\U0001F600\"", `[]`, `{}`, `[1,"a",null,{"k":[true,false]}]`,
	` { "a" : 1 , "b" : [ 2 , 3 ] } `, "[\n1,\t2\r]", `{"":""}`, `[[[[]]]]`,
	`{"a":{"b":{"c":-0.5e10}}}`,
}

var invalid = []string{
	``, ` `, `-`, `01`, `1.`, `.5`, `1e`, `1e+`, `+1`, `--1`, `0x10`, `NaN`, `Infinity`,
	`tru`, `nul`, `nulll`, `True`, `"`, `"abc`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"\x01\"",
	"\"\t\"", `[`, `[1,]`, `[,1]`, `[1 2]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{a:1}`,
	`{"a" 1}`, `{1:2}`, `]`, `}`, `[}`, `{]`, `1 2`, `"a" "b"`, `[1]]`, `{}}`,
	"\"\xff\"", "\"\xc0\xaf\"", "\"\xe0\x80\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
	"\"\xc3\"", "\"\xe2\x82\"", "\"\x80\"", "\"\xf5\x80\x80\x80\"",
}

func TestValid(t *testing.T) {
	for _, s := range valid {
		if !Valid([]byte(s)) {
			t.Errorf("Valid(%q) = false", s)
		}
		if !json.Valid([]byte(s)) {
			t.Errorf("test case %q is not valid to encoding/json", s)
		}
	}
	for _, s := range invalid {
		if Valid([]byte(s)) {
			t.Errorf("Valid(%q) = true", s)
		}
	}
}

// TestUTF8FirstTwoBytes: every pair of a string's first two bytes,
// followed by 0 to 2 continuation bytes, is accepted exactly when it is
// UTF-8, the narrower second-byte ranges after E0, ED, F0 and F4 included.
func TestUTF8FirstTwoBytes(t *testing.T) {
	for c := 0x80; c <= 0xFF; c++ {
		for d := 0; d <= 0xFF; d++ {
			for _, tail := range []string{"", "\x80", "\x80\x80"} {
				b := []byte("\"" + string([]byte{byte(c), byte(d)}) + tail + "\"")
				if got, want := Valid(b), utf8.Valid(b) && json.Valid(b); got != want {
					t.Errorf("Valid(% x) = %v, want %v", b, got, want)
				}
			}
		}
	}
}

// feedChunks feeds s split at every cut in cuts and returns how many bytes
// the value took, whether it completed, and the error.
func feedChunks(s string, cuts ...int) (int64, bool, error) {
	var v Value
	prev := 0
	for _, c := range append(cuts, len(s)) {
		n, done, err := v.Feed([]byte(s[prev:c]))
		if err != nil || done {
			return int64(prev + n), done, err
		}
		prev = c
	}
	return v.Len(), false, nil
}

// Any split of the input gives the same answer as one piece.
func TestFeedInPieces(t *testing.T) {
	for _, s := range append(append([]string{}, valid...), invalid...) {
		s = strings.TrimSpace(s)
		n1, d1, e1 := feedChunks(s)
		for cut := 0; cut <= len(s); cut++ {
			for cut2 := cut; cut2 <= len(s); cut2++ {
				n, d, e := feedChunks(s, cut, cut2)
				if n != n1 || d != d1 || (e == nil) != (e1 == nil) {
					t.Fatalf("%q cut at %d, %d: %d %v %v; in one piece %d %v %v", s, cut, cut2, n, d, e, n1, d1, e1)
				}
			}
		}
	}
}

// A value's end is where it ends, and what follows is not consumed: a
// number ends at the first byte that cannot continue it, or at End.
func TestValueEnd(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		done bool
	}{
		{`"ab",`, 4, true},
		{`{"a":1}}`, 7, true},
		{`[1,2] x`, 5, true},
		{`123,`, 3, true},
		{`-1.5e3}`, 6, true},
		{`0]`, 1, true},
		{`01`, 1, true},
		{`true,`, 4, true},
		{`123`, 3, false},
		{`[1,2`, 4, false},
	}
	for _, tt := range tests {
		var v Value
		n, done, err := v.Feed([]byte(tt.in))
		if err != nil || n != tt.n || done != tt.done {
			t.Errorf("Feed(%q) = %d, %v, %v; want %d, %v", tt.in, n, done, err, tt.n, tt.done)
		}
	}
	var v Value
	if _, done, _ := v.Feed([]byte("42")); done || v.End() != nil {
		t.Errorf("a number at the end of the input: done early or End = %v", v.End())
	}
	v = Value{}
	v.Feed([]byte(`{"a":4`))
	if err := v.End(); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "ends early") {
		t.Errorf("End of a cut object = %v", err)
	}
}

func TestErrorsStickAndSayWhere(t *testing.T) {
	var v Value
	_, _, err := v.Feed([]byte(`[1, 2, x]`))
	if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "at byte 8") {
		t.Fatalf("Feed = %v, want ErrSyntax at byte 8", err)
	}
	if _, _, err2 := v.Feed([]byte(`]`)); err2 != err {
		t.Fatalf("after an error Feed = %v, want the same error", err2)
	}
}

func TestDepthIsBounded(t *testing.T) {
	if !Valid([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth))) {
		t.Fatalf("%d levels refused", MaxDepth)
	}
	var v Value
	_, _, err := v.Feed([]byte(strings.Repeat("[", MaxDepth+1)))
	if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("Feed of %d open arrays = %v", MaxDepth+1, err)
	}
}

// FuzzValid: the scanner agrees with encoding/json plus UTF-8 validity, in
// one piece and in two.
func FuzzValid(f *testing.F) {
	for _, s := range append(append([]string{}, valid...), invalid...) {
		f.Add([]byte(s), 1)
	}
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		want := json.Valid(b) && utf8.Valid(b)
		if got := Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json and utf8 say %v", b, got, want)
		}
		s := strings.TrimSpace(string(b))
		if cut < 0 || cut > len(s) {
			return
		}
		n1, d1, e1 := feedChunks(s)
		if n, d, e := feedChunks(s, cut); n != n1 || d != d1 || (e == nil) != (e1 == nil) {
			t.Fatalf("%q cut at %d: %d %v %v; in one piece %d %v %v", s, cut, n, d, e, n1, d1, e1)
		}
	})
}

func BenchmarkFeed(b *testing.B) {
	doc := []byte(`[` + strings.Repeat(`{"name":"caf\u00e9 \u00e9t\u00e9","n":12345.678,"ok":true,"tags":["a","b"]},`, 20000) + `null]`)
	str := []byte(`"` + strings.Repeat("x", len(doc)) + `"`)
	for _, c := range []struct {
		name string
		in   []byte
	}{{"structure", doc}, {"string", str}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.in)))
			for b.Loop() {
				var v Value
				for p := c.in; len(p) > 0; {
					k := min(len(p), 64<<10)
					if _, _, err := v.Feed(p[:k]); err != nil {
						b.Fatal(err)
					}
					p = p[k:]
				}
				if err := v.End(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Len is how many bytes Feed consumed.
func (v *Value) Len() int64 { return v.off }
