package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"unicode/utf8"
)

// Pattern is one form of a secret's value the scan looks for.
type Pattern struct {
	Secret string // the secret's name
	Form   string // how the value is written: raw, hex, base64, ...
	Bytes  []byte
}

// minPatternLen is the shortest pattern the scanner takes: every
// occurrence of one at least this long holds a 4-byte window at a
// 4-aligned offset within its first 4 bytes (scan.go).
const minPatternLen = 7

// Patterns are the forms of value a snapshot could hold it in:
//   - raw: the bytes themselves (environment blocks, os.environ's bytes);
//   - python-str: as CPython stores a str that is not ASCII (Latin-1 or
//     UCS-2, one or two bytes a character; an ASCII str is raw);
//   - hex and HEX: hexadecimal, lower and upper case;
//   - base64 and base64url, each at the 3 alignments the value can have
//     in a longer encoded text: the characters that depend only on the
//     value's bytes, whatever precedes and follows it.
//
// Forms shorter than 7 bytes and duplicates are left out.
func Patterns(name string, value []byte) []Pattern {
	var out []Pattern
	add := func(form string, b []byte) {
		if len(b) < minPatternLen {
			return
		}
		for _, p := range out {
			if bytes.Equal(p.Bytes, b) {
				return
			}
		}
		out = append(out, Pattern{Secret: name, Form: form, Bytes: b})
	}
	add("raw", value)
	if s := pythonStr(value); s != nil {
		add("python-str", s)
	}
	h := hex.EncodeToString(value)
	add("hex", []byte(h))
	add("HEX", bytes.ToUpper([]byte(h)))
	for _, enc := range []struct {
		form string
		e    *base64.Encoding
	}{{"base64", base64.StdEncoding}, {"base64url", base64.URLEncoding}} {
		for a := range 3 {
			add(enc.form, base64Core(enc.e, value, a))
		}
	}
	return out
}

// base64Core is the part of the encoding of value, preceded by a bytes
// (0-2) of anything, that depends on value alone: the characters whose 6
// bits all come from value.
func base64Core(e *base64.Encoding, value []byte, a int) []byte {
	in := make([]byte, a+len(value))
	copy(in[a:], value)
	enc := e.EncodeToString(in)
	start := (8*a + 5) / 6          // first character after the preceding bytes' bits
	end := 8 * (a + len(value)) / 6 // characters wholly inside value's bits
	if end <= start {
		return nil
	}
	return []byte(enc[start:end])
}

// pythonStr is value as CPython's compact str holds it when it is not
// ASCII: Latin-1 if every code point is below 256, UCS-2 (little endian)
// if below 65536. Values with code points above that (UCS-4) and ASCII
// values (held raw) give nil.
func pythonStr(value []byte) []byte {
	if !utf8.Valid(value) {
		return nil
	}
	maxRune := rune(0)
	for _, r := range string(value) {
		maxRune = max(maxRune, r)
	}
	switch {
	case maxRune < 0x80, maxRune > 0xffff:
		return nil
	case maxRune < 0x100:
		out := make([]byte, 0, len(value))
		for _, r := range string(value) {
			out = append(out, byte(r))
		}
		return out
	}
	out := make([]byte, 0, 2*len(value))
	for _, r := range string(value) {
		out = binary.LittleEndian.AppendUint16(out, uint16(r))
	}
	return out
}
