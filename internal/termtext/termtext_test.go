package termtext

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain text: 1 < 2 \\ ok", "plain text: 1 < 2 \\ ok"},
		{"keeps\nnewlines\tand tabs", "keeps\nnewlines\tand tabs"},
		{"\x1b[2Jcleared", `\x1b[2Jcleared`},
		{"\x1b]0;title\x07", `\x1b]0;title\x07`},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"cr\roverwrites", `cr\x0doverwrites`},
		{"nul\x00del\x7f", `nul\x00del\x7f`},
		{"c1 csi \u009b2J and \u0080 \u009f", `c1 csi \u009b2J and \u0080 \u009f`},
		{"raw byte \x9b2J", `raw byte \x9b2J`},
		{"bad \xff\xfe utf-8", `bad \xff\xfe utf-8`},
		{"truncated \xe2\x82", `truncated \xe2\x82`},
		{"unicode stays: é ü 日本 \u00a0 \ufffd 🙂", "unicode stays: é ü 日本 \u00a0 \ufffd 🙂"},
	} {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestEveryControlCharacter: each of C0, DEL and C1 is escaped, alone and
// amid text; newline and tab are kept by Escape and escaped by Line.
func TestEveryControlCharacter(t *testing.T) {
	for c := rune(0); c <= 0x9f; c++ {
		if c >= 0x20 && c < 0x7f {
			continue
		}
		s := "a" + string(c) + "b"
		var want string
		switch {
		case c == '\n' || c == '\t':
			want = s
		case c < 0x80:
			want = fmt.Sprintf(`a\x%02xb`, c)
		default:
			want = fmt.Sprintf(`a\u%04xb`, c)
		}
		if got := Escape(s); got != want {
			t.Errorf("Escape(%q) = %q, want %q", s, got, want)
		}
		line := Line(s)
		if strings.ContainsAny(line, "\n\t") || !utf8.ValidString(line) {
			t.Errorf("Line(%q) = %q", s, line)
		}
	}
	if got := Line("a\nb\tc"); got != `a\nb\tc` {
		t.Errorf("Line = %q", got)
	}
}

func TestInlineAndIndent(t *testing.T) {
	forged := "bad input\nthaw: all good\n\x1b[2J\n"
	if got, want := Inline(forged), "bad input\n"+Prefix+"thaw: all good\n"+Prefix+`\x1b[2J`; got != want {
		t.Errorf("Inline = %q, want %q", got, want)
	}
	if got := Inline("one line\n\n"); got != "one line" {
		t.Errorf("Inline of one line = %q", got)
	}
	if got := Inline("\nthaw: all good"); got != "\n"+Prefix+"thaw: all good" {
		t.Errorf("Inline with a leading newline = %q", got)
	}
	tb := "Traceback (most recent call last):\n  File \"handler.py\", line 3\n\x1b]0;x\x07ValueError: x\n"
	want := Prefix + "Traceback (most recent call last):\n" + Prefix + "  File \"handler.py\", line 3\n" + Prefix + `\x1b]0;x\x07ValueError: x` + "\n"
	if got := Indent(tb); got != want {
		t.Errorf("Indent = %q, want %q", got, want)
	}
	for _, empty := range []string{"", "\n", "\n\n"} {
		if got := Indent(empty); got != "" {
			t.Errorf("Indent(%q) = %q, want nothing", empty, got)
		}
	}
}

// TestPlainTextIsNotCopied: the common case costs no allocation.
func TestPlainTextIsNotCopied(t *testing.T) {
	s := "function hello raised ValueError: bad input (é, 日本)\n\tat line 3"
	if n := testing.AllocsPerRun(100, func() { _ = Escape(s) }); n != 0 {
		t.Errorf("Escape of plain text: %v allocations", n)
	}
}

// checkSafe fails if out holds a raw control character (but newline and
// tab unless oneLine) or is not UTF-8.
func checkSafe(t *testing.T, what, in, out string, oneLine bool) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%s(%q) = %q: not UTF-8", what, in, out)
	}
	for _, r := range out {
		allowed := !oneLine && (r == '\n' || r == '\t')
		if (r < 0x20 || (r >= 0x7f && r <= 0x9f)) && !allowed {
			t.Fatalf("%s(%q) = %q: raw %U", what, in, out, r)
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "plain", "a\nb\tc", "\x1b[2J\x1b]0;t\x07", "\u009b\x9b\xff", "x\nthaw: all good\n", "\xe2\x82"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		esc := Escape(s)
		checkSafe(t, "Escape", s, esc, false)
		if strings.Count(esc, "\n") != strings.Count(s, "\n") {
			t.Fatalf("Escape(%q) = %q: newlines changed", s, esc)
		}
		if isSafe(s, false) != (esc == s) {
			t.Fatalf("Escape(%q) = %q: changed %v, plain %v", s, esc, esc != s, isSafe(s, false))
		}
		checkSafe(t, "Line", s, Line(s), true)
		in := Inline(s)
		checkSafe(t, "Inline", s, in, false)
		for i, l := range strings.Split(in, "\n") {
			if i > 0 && !strings.HasPrefix(l, Prefix) {
				t.Fatalf("Inline(%q) = %q: line %d without the prefix", s, in, i)
			}
		}
		ind := Indent(s)
		checkSafe(t, "Indent", s, ind, false)
		if ind != "" && !strings.HasSuffix(ind, "\n") {
			t.Fatalf("Indent(%q) = %q: no final newline", s, ind)
		}
		for _, l := range strings.SplitAfter(ind, "\n") {
			if l != "" && !strings.HasPrefix(l, Prefix) {
				t.Fatalf("Indent(%q) = %q: line %q without the prefix", s, ind, l)
			}
		}
	})
}

func TestJSON(t *testing.T) {
	doc := map[string]string{"a": "x\x7fy\u0080z\u009b\u00a0é\x1b"}
	b, _ := json.Marshal(doc)
	got := JSON(b)
	if want := `{"a":"x\u007fy\u0080z\u009b` + "\u00a0é" + `\u001b"}`; string(got) != want {
		t.Fatalf("JSON(%q) = %q, want %q", b, got, want)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["a"] != doc["a"] {
		t.Fatalf("does not decode to the same: %v %q", err, back)
	}
	plain := []byte(`{"a":"b"}`)
	if out := JSON(plain); &out[0] != &plain[0] {
		t.Fatal("plain JSON was copied")
	}
}
