// Package jsonscan checks one JSON value as its bytes stream by, a chunk at
// a time, in constant memory but for its nesting (at most MaxDepth): the
// host validates what a guest sends on its way through, without holding it
// whole first. Strings must be valid UTF-8 (RFC 8259), which
// encoding/json.Valid does not check.
package jsonscan

import (
	"errors"
	"fmt"
)

// MaxDepth bounds the nesting of arrays and objects (encoding/json's bound).
const MaxDepth = 10000

// ErrSyntax is the error of bytes that are not (the start of) one JSON value.
var ErrSyntax = errors.New("invalid JSON")

// state is where a Value is in its grammar.
type state uint8

const (
	stValue       state = iota // a value starts (after optional space)
	stArrayFirst               // after '[': a value or ']'
	stObjectFirst              // after '{': a key or '}'
	stKey                      // after ',' in an object: a key
	stColon                    // after a key
	stAfter                    // after a value inside an array or object: ',' or its end
	stString                   // inside a string
	stEscape                   // after '\' in a string
	stHex                      // in the 4 hex digits of \u
	stUTF8                     // in a multi-byte UTF-8 sequence
	stMinus                    // after '-'
	stZero                     // after a leading 0
	stInt                      // in the integer part's digits
	stDot                      // after '.'
	stFrac                     // in the fraction's digits
	stExp                      // after 'e' or 'E'
	stExpSign                  // after the exponent's sign
	stExpDigits                // in the exponent's digits
	stLiteral                  // in true, false or null
	stDone                     // the value is complete
)

// Value scans one JSON value. The zero Value is ready for the value's first
// byte.
type Value struct {
	st      state
	stack   []byte // '[' or '{' of each open array and object
	key     bool   // the string being scanned is an object's key
	hex     int    // \u digits still to come
	utf8    int    // continuation bytes still to come
	lo, hi  byte   // the range of the next continuation byte
	literal string // what is left of true, false or null
	off     int64  // bytes consumed so far
	err     error
}

// Feed consumes the value's bytes from the start of p. It returns how many
// bytes of p belong to the value and whether the value is complete. A
// number is complete only at the first byte that cannot continue it, which
// is not consumed (so n < len(p)), or at End. After an error, every call
// returns it.
func (v *Value) Feed(p []byte) (n int, done bool, err error) {
	if v.err != nil {
		return 0, false, v.err
	}
	for n < len(p) && v.st != stDone {
		used, err := v.step(p[n:])
		if err != nil {
			v.off += int64(n)
			v.err = fmt.Errorf("%w: %v at byte %d", ErrSyntax, err, v.off+1)
			return n, false, v.err
		}
		n += used
	}
	v.off += int64(n)
	return n, v.st == stDone, nil
}

// End says the input ended: nil if the value is complete (a number may end
// here), else an error saying it was cut short.
func (v *Value) End() error {
	if v.err != nil {
		return v.err
	}
	switch v.st {
	case stZero, stInt, stFrac, stExpDigits:
		if len(v.stack) == 0 {
			v.st = stDone
		}
	}
	if v.st != stDone {
		v.err = fmt.Errorf("%w: the value ends early, after %d bytes", ErrSyntax, v.off)
		return v.err
	}
	return nil
}

// Valid reports whether b is one JSON value (with optional white space
// around it) whose strings are valid UTF-8.
func Valid(b []byte) bool {
	var v Value
	i := skipSpace(b, 0)
	n, done, err := v.Feed(b[i:])
	if err != nil {
		return false
	}
	if !done && v.End() != nil {
		return false
	}
	return skipSpace(b, i+n) == len(b)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// plain marks the bytes a string holds as they are: not '"', '\', a control
// character or the start of a multi-byte sequence.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// step consumes the bytes of p that the current state takes and moves on.
// It takes none only where a number ends at p[0], which is then the next
// state's.
func (v *Value) step(p []byte) (int, error) {
	c := p[0]
	switch v.st {
	case stString:
		i := 0
		for i < len(p) && plain[p[i]] {
			i++
		}
		if i > 0 {
			return i, nil
		}
		return 1, v.stringByte(c)
	case stInt, stFrac, stExpDigits:
		i := 0
		for i < len(p) && isDigit(p[i]) {
			i++
		}
		if i > 0 {
			return i, nil
		}
		return v.numberEnd(c)
	case stValue, stArrayFirst:
		if isSpace(c) {
			return 1, nil
		}
		if c == ']' && v.st == stArrayFirst {
			return 1, v.close()
		}
		return 1, v.begin(c)
	case stObjectFirst, stKey:
		switch {
		case isSpace(c):
		case c == '"':
			v.st, v.key = stString, true
		case c == '}' && v.st == stObjectFirst:
			return 1, v.close()
		default:
			return 0, fmt.Errorf("%q where an object's key belongs", c)
		}
		return 1, nil
	case stColon:
		switch {
		case isSpace(c):
		case c == ':':
			v.st = stValue
		default:
			return 0, fmt.Errorf("%q after an object's key", c)
		}
		return 1, nil
	case stAfter:
		return 1, v.after(c)
	case stEscape, stHex, stUTF8:
		return 1, v.stringByte(c)
	case stLiteral:
		if c != v.literal[0] {
			return 0, fmt.Errorf("%q in a literal", c)
		}
		v.literal = v.literal[1:]
		if v.literal == "" {
			v.valueDone()
		}
		return 1, nil
	default: // the other number states
		return v.numberByte(c)
	}
}

// begin starts a value at c.
func (v *Value) begin(c byte) error {
	switch {
	case c == '"':
		v.st = stString
	case c == '{' || c == '[':
		if len(v.stack) >= MaxDepth {
			return fmt.Errorf("nested deeper than %d", MaxDepth)
		}
		v.stack = append(v.stack, c)
		v.st = stObjectFirst
		if c == '[' {
			v.st = stArrayFirst
		}
	case c == '-':
		v.st = stMinus
	case c == '0':
		v.st = stZero
	case c >= '1' && c <= '9':
		v.st = stInt
	case c == 't':
		v.st, v.literal = stLiteral, "rue"
	case c == 'f':
		v.st, v.literal = stLiteral, "alse"
	case c == 'n':
		v.st, v.literal = stLiteral, "ull"
	default:
		return fmt.Errorf("%q where a value belongs", c)
	}
	return nil
}

// after handles c after a value inside an array or object.
func (v *Value) after(c byte) error {
	top := v.stack[len(v.stack)-1]
	switch {
	case isSpace(c):
	case c == ',' && top == '[':
		v.st = stValue
	case c == ',':
		v.st = stKey
	case c == ']' && top == '[', c == '}' && top == '{':
		return v.close()
	default:
		return fmt.Errorf("%q after a value in an array or object", c)
	}
	return nil
}

// close ends the innermost array or object.
func (v *Value) close() error {
	v.stack = v.stack[:len(v.stack)-1]
	v.valueDone()
	return nil
}

// valueDone: a value ended; what comes next depends on what holds it.
func (v *Value) valueDone() {
	if len(v.stack) == 0 {
		v.st = stDone
		return
	}
	v.st = stAfter
}

// stringByte handles a byte of a string that is not plain ASCII.
func (v *Value) stringByte(c byte) error {
	switch v.st {
	case stEscape:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			v.st = stString
		case 'u':
			v.st, v.hex = stHex, 4
		default:
			return fmt.Errorf("escape \\%c in a string", c)
		}
		return nil
	case stHex:
		if !isHex(c) {
			return fmt.Errorf("%q in a \\u escape", c)
		}
		if v.hex--; v.hex == 0 {
			v.st = stString
		}
		return nil
	case stUTF8:
		if c < v.lo || c > v.hi {
			return fmt.Errorf("invalid UTF-8 byte 0x%02x in a string", c)
		}
		v.lo, v.hi = 0x80, 0xBF
		if v.utf8--; v.utf8 == 0 {
			v.st = stString
		}
		return nil
	}
	switch {
	case c == '"':
		if v.key {
			v.st, v.key = stColon, false
			return nil
		}
		v.valueDone()
	case c == '\\':
		v.st = stEscape
	case c < 0x20:
		return fmt.Errorf("control character 0x%02x in a string", c)
	default:
		return v.utf8Start(c)
	}
	return nil
}

// utf8Start begins a multi-byte sequence at c (RFC 3629: no overlong forms,
// no surrogates, nothing beyond U+10FFFF).
func (v *Value) utf8Start(c byte) error {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		v.utf8 = 1
	case c >= 0xE0 && c <= 0xEF:
		v.utf8 = 2
	case c >= 0xF0 && c <= 0xF4:
		v.utf8 = 3
	default:
		return fmt.Errorf("invalid UTF-8 byte 0x%02x in a string", c)
	}
	// The second byte's range: narrower after E0 and F0 (overlong forms),
	// ED (surrogates) and F4 (beyond U+10FFFF).
	v.lo, v.hi = 0x80, 0xBF
	switch c {
	case 0xE0:
		v.lo = 0xA0
	case 0xED:
		v.hi = 0x9F
	case 0xF0:
		v.lo = 0x90
	case 0xF4:
		v.hi = 0x8F
	}
	v.st = stUTF8
	return nil
}

// numberByte handles c in the number states that need a particular byte.
func (v *Value) numberByte(c byte) (int, error) {
	switch v.st {
	case stMinus:
		switch {
		case c == '0':
			v.st = stZero
		case c >= '1' && c <= '9':
			v.st = stInt
		default:
			return 0, fmt.Errorf("%q after '-'", c)
		}
	case stZero:
		return v.numberEnd(c)
	case stDot:
		if !isDigit(c) {
			return 0, fmt.Errorf("%q after a decimal point", c)
		}
		v.st = stFrac
	case stExp:
		switch {
		case c == '+' || c == '-':
			v.st = stExpSign
		case isDigit(c):
			v.st = stExpDigits
		default:
			return 0, fmt.Errorf("%q in an exponent", c)
		}
	case stExpSign:
		if !isDigit(c) {
			return 0, fmt.Errorf("%q in an exponent", c)
		}
		v.st = stExpDigits
	}
	return 1, nil
}

// numberEnd handles c after the digits of a number's part: the part that
// may follow, or else the number's end (c is then not consumed, and is the
// next state's).
func (v *Value) numberEnd(c byte) (int, error) {
	switch {
	case c == '.' && (v.st == stZero || v.st == stInt):
		v.st = stDot
	case (c == 'e' || c == 'E') && v.st != stExpDigits:
		v.st = stExp
	default:
		v.valueDone()
		return 0, nil
	}
	return 1, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
