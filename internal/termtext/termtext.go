// Package termtext makes text that thaw does not control safe to print on
// a terminal: a handler's error and traceback, a guest's console, QEMU's
// log, anything a daemon's message quotes from them.
//
// Control characters are shown escaped instead of written raw, so such
// text cannot move the cursor, clear the screen, set the window title or
// colour what follows: C0 controls and DEL as \x1b, C1 controls as
// \u009b, bytes that are not UTF-8 as \xff. Newlines and tabs are kept
// where text may span lines (Escape, Inline, Indent); every line but a
// first one that follows thaw's own words then starts with Prefix, so
// guest text can never begin a line that passes for thaw's own output.
package termtext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Prefix starts every line of untrusted text that is not on a line thaw
// began itself.
const Prefix = "  | "

// Escape returns s with every control character but newline and tab
// escaped, and bytes that are not UTF-8 escaped.
func Escape(s string) string { return escape(s, false) }

// Line is Escape for text that must stay on one line (a table cell, a
// progress line): newline and tab are escaped too, as \n and \t.
func Line(s string) string { return escape(s, true) }

// Inline returns s escaped to follow thaw's own words on a line (as in
// "thaw: " + Inline(msg)): its first line as it is, every further line
// starting with Prefix. Trailing newlines are dropped; the result does not
// end in one.
func Inline(s string) string {
	s = Escape(strings.TrimRight(s, "\n"))
	if !strings.Contains(s, "\n") {
		return s
	}
	return strings.ReplaceAll(s, "\n", "\n"+Prefix)
}

// Indent returns s escaped as a block under a line of thaw's own: every
// line starts with Prefix and ends with a newline. Trailing newlines are
// dropped; an empty s is "".
func Indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return Prefix + Inline(s) + "\n"
}

// escape escapes what Escape does and, if oneLine, newline and tab.
func escape(s string, oneLine bool) string {
	if isSafe(s, oneLine) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\n' && oneLine:
				b.WriteString(`\n`)
			case c == '\t' && oneLine:
				b.WriteString(`\t`)
			case c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f):
				b.WriteByte(c)
			default:
				writeHex(&b, `\x`, uint32(c), 2)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			writeHex(&b, `\x`, uint32(c), 2)
		case isC1(r):
			writeHex(&b, `\u`, uint32(r), 4)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isSafe reports whether s has nothing escape would change, without
// allocating: the common case of plain text.
func isSafe(s string, oneLine bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			continue
		}
		if (c == '\n' || c == '\t') && !oneLine {
			continue
		}
		if c < utf8.RuneSelf {
			return false
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || isC1(r) {
			return false
		}
		i += size - 1
	}
	return true
}

// isC1 reports whether r is a C1 control character (U+0080 to U+009F),
// which terminals may take as an escape sequence such as CSI (U+009B).
func isC1(r rune) bool { return r >= 0x80 && r <= 0x9f }

const hexDigits = "0123456789abcdef"

// writeHex writes lead and v in n lowercase hex digits.
func writeHex(b *strings.Builder, lead string, v uint32, n int) {
	b.WriteString(lead)
	for shift := 4 * (n - 1); shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(v>>shift)&0xf])
	}
}

// JSON returns a JSON document with the controls that JSON leaves raw in
// its strings, DEL and the C1 controls U+0080-U+009F, written as \u
// escapes: the document decodes to the same values, and a terminal it is
// printed on cannot act on them (JSON encoders escape the C0 controls
// already). Outside strings valid JSON has none of these characters.
func JSON(b []byte) []byte {
	var out []byte
	start := 0
	for i := 0; i < len(b); i++ {
		var r int
		switch {
		case b[i] == 0x7f:
			r = 0x7f
		case b[i] == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f:
			r = int(b[i+1])
		default:
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(b)+16)
		}
		out = append(out, b[start:i]...)
		out = append(out, fmt.Sprintf(`\u%04x`, r)...)
		if r != 0x7f {
			i++
		}
		start = i + 1
	}
	if out == nil {
		return b
	}
	return append(out, b[start:]...)
}
