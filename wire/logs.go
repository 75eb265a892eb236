package wire

import "time"

// InvocationLogs is what an invocation wrote: the "logs" of its answer
// when the request asked for them (logs: true).
type InvocationLogs struct {
	// Output is what the function, and the processes it started, wrote
	// to stdout and stderr since its previous invocation on the same VM
	// ended (the handler's run, and what it left running wrote
	// meanwhile), in the order written, as a terminal shows them: all of
	// it, or if it was over the daemon's bound (thawd --max-logs) its
	// first and last parts with a line "[thaw: N bytes of output cut
	// here]" between them. Bytes that are not UTF-8 are written \xff.
	Output string `json:"output"`
	// OutputBytes is how many bytes were written in all; CutBytes how
	// many of them Output lacks.
	OutputBytes int64 `json:"output_bytes"`
	CutBytes    int64 `json:"cut_bytes,omitempty"`
	// Kernel is the guest kernel's messages since then (an OOM kill, a
	// segfault), one "[seconds since boot] text" line each.
	Kernel string `json:"kernel,omitempty"`
	// TraceID is the trace of the request that invoked (when tracing is
	// on and the request's span is sampled).
	TraceID string `json:"trace_id,omitempty"`
	// Missing says why there is no output: the guest's agent predates
	// output capture (a snapshot taken with an older guest image), or it
	// could not capture.
	Missing string `json:"missing,omitempty"`
}

// Log line streams.
const (
	StreamOutput = "output" // stdout and stderr, in the order written
	StreamKernel = "kernel" // the guest kernel's messages
)

// LogLine is one line of a function's logs.
type LogLine struct {
	// Time is when the invocation whose logs the line is in ended (an
	// invocation's lines are captured together, when its handler returns).
	Time       time.Time `json:"time"`
	Function   string    `json:"function"`
	Invocation string    `json:"invocation"`
	// TraceID is the trace of the request that invoked (InvocationLogs).
	TraceID string `json:"trace_id,omitempty"`
	// Stream is "output" (stdout and stderr) or "kernel".
	Stream string `json:"stream"`
	// Text is the line without its newline (a last line that had none
	// is a line too).
	Text string `json:"text"`
}

// LogPage is a page of a function's log lines, oldest first
// (GET /v1/functions/{name}/logs).
type LogPage struct {
	Items []LogLine `json:"items"`
	// Next is always there: the position after the last line of the page
	// (after the given one if the page is empty). Passed as after, it
	// gives the lines that follow, those recorded later included: a
	// follower passes it again and again, with wait_s.
	Next string `json:"next"`
	// More: lines after Next are there already (the page was full).
	More bool `json:"more,omitempty"`
}
