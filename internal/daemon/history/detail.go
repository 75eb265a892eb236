package history

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/thaw-dev/thaw/wire"
)

// DefaultMaxStoredResult is how many result bytes an invocation's history
// keeps by default.
const DefaultMaxStoredResult = 64 << 10

// maxStoredText bounds an error message or traceback kept in the history.
const maxStoredText = 16 << 10

// forHistory is the copy of inv the invocation history keeps: a result
// over limit bytes becomes its first bytes (as text) and the note that it
// was cut, and long error texts are cut, so listing invocations stays
// bounded whatever handlers return.
func forHistory(inv *wire.Invocation, limit int) *wire.Invocation {
	c := *inv
	c.Logs = nil // kept apart (logs.go)
	if len(c.Result) > limit {
		c.ResultBytes = len(c.Result)
		c.ResultTruncated = true
		c.ResultPrefix = truncUTF8(string(c.Result[:min(len(c.Result), limit+utf8.UTFMax)]), limit) // never a copy of the whole
		c.Result = nil
	}
	if e := c.Error; e != nil && (len(e.Message) > maxStoredText || len(e.Traceback) > maxStoredText) {
		ec := *e
		ec.Message, ec.Traceback = truncUTF8(ec.Message, maxStoredText), truncUTF8(ec.Traceback, maxStoredText)
		c.Error = &ec
		c.ErrorTruncated = true
	}
	return &c
}

func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// detail encodes the history's copy of inv.
func (h *History) detail(inv *wire.Invocation) []byte {
	b, _ := json.Marshal(forHistory(inv, h.cfg.MaxStoredResultBytes))
	return b
}
