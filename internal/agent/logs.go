package agent

import (
	"fmt"
	"unicode/utf8"
)

// Logs is what an invocation wrote, as the guest agent sends it with the
// invocation's reply (protocol 5, agent "thaw-agent/5"; older agents send
// none, and Reply.Logs is nil):
//
//	{"output":"...","bytes":N,"cut":N,"kernel":"...","error":"..."}
//
// Output is what the function and the processes it started wrote to
// stdout and stderr since the previous invocation ended (the handler's
// run, and what was left running wrote meanwhile), in the order written:
// all of it, or if it was over the invoke request's max_logs bytes its
// first three quarters and last quarter with a line "[thaw: N bytes of
// output cut here]" between them. Bytes is how many were written in all,
// Cut how many are not in Output. Bytes that are not UTF-8 are escaped
// (\xff). Kernel is the guest kernel's messages since then, as dmesg
// prints them; Error why no output was captured.
type Logs struct {
	Output string `json:"output"`
	Bytes  int64  `json:"bytes"`
	Cut    int64  `json:"cut,omitempty"`
	Kernel string `json:"kernel,omitempty"`
	Error  string `json:"error,omitempty"`
}

// DefaultMaxLogs is how many bytes of an invocation's output the guest
// sends unless the host says otherwise; MaxLogsLimit the most the host
// may ask for.
const (
	DefaultMaxLogs = 256 << 10
	MaxLogsLimit   = 1 << 20
)

// maxKernelLog bounds an invocation's kernel messages (the agent sends at
// most 16 KiB of them).
const maxKernelLog = 64 << 10

// escapeFactor: a byte of output is at most this many bytes of UTF-8 once
// the agent escaped it (\xff), and at most 6 bytes of JSON (\u0001).
const escapeFactor = 4

// SetMaxLogs sets how many bytes of each invocation's output the guest
// sends (DefaultMaxLogs if n is 0 or less, at most MaxLogsLimit), and
// makes room for them in the bound on a reply (MaxEnvelope is for the
// rest). Call it before the first request, as SpillTo.
func (c *Conn) SetMaxLogs(n int) {
	if n <= 0 {
		n = DefaultMaxLogs
	}
	n = min(n, MaxLogsLimit)
	c.maxLogs = n
	c.maxEnvelope = MaxEnvelope + 6*(n+maxKernelLog)
}

// bound keeps the logs of a guest that sent more than it was asked for
// within what it could have sent: output and kernel messages are cut, and
// the cut is counted.
func (l *Logs) bound(maxLogs int) {
	l.Bytes = max(l.Bytes, 0)
	l.Cut = max(l.Cut, 0)
	if limit := escapeFactor*maxLogs + 256; len(l.Output) > limit {
		kept := truncUTF8(l.Output, limit)
		l.Cut += int64(len(l.Output) - len(kept))
		l.Output = kept + fmt.Sprintf("\n[thaw: the guest sent more than %d bytes of output; the rest was cut]\n", limit)
	}
	if len(l.Kernel) > maxKernelLog {
		l.Kernel = truncUTF8(l.Kernel, maxKernelLog) + "\n[thaw: kernel messages cut]\n"
	}
}

// truncUTF8 is s's first bytes, at most n, ending on a whole character.
func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				s = s[:i]
			}
			break
		}
	}
	return s
}
