// Package output formats what thaw prints: aligned tables whose cells are
// escaped to one line, sizes, durations, times and digests, YAML from
// JSON, and the timing rows of an invocation. It knows nothing of a run.
package output

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/termtext"
)

// NewTable returns a tabwriter for aligned columns; Flush it.
func NewTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// Row writes one tab-separated table row. Cells are escaped to one line
// each: some carry text a guest controls (a failed VM's reason, an error).
func Row(w io.Writer, cells ...string) {
	line := make([]string, len(cells))
	for i, c := range cells {
		line[i] = termtext.Line(c)
	}
	fmt.Fprintln(w, strings.Join(line, "\t"))
}

// FmtMS formats milliseconds with one decimal; 0 is "-".
func FmtMS(ms float64) string {
	if ms == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", ms)
}

// FmtBytes humanizes a size in IEC units: "512 B", "123.4 MiB".
func FmtBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= 1024
		if v < 1024 || unit == "TiB" {
			return fmt.Sprintf("%.1f %s", v, unit)
		}
	}
	panic("unreachable")
}

// FmtMiB formats a memory size given in MiB: "512 MiB", "2 GiB".
func FmtMiB(mib int) string {
	switch {
	case mib <= 0:
		return "-"
	case mib >= 1024 && mib%1024 == 0:
		return fmt.Sprintf("%d GiB", mib/1024)
	case mib >= 1024:
		return FmtBytes(int64(mib) << 20)
	}
	return fmt.Sprintf("%d MiB", mib)
}

// Now is time.Now; tests may replace it.
var Now = time.Now

// FmtAge formats t for a table: relative when recent, else a short date.
func FmtAge(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := Now().Sub(t)
	switch {
	case d < 0:
		return FmtTime(t)
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	case d < 7*24*time.Hour:
		return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
	}
	return t.Local().Format("2006-01-02 15:04")
}

// FmtUntil formats a time to come: "in 42s" when near, else its date.
func FmtUntil(t time.Time) string {
	d := t.Sub(Now())
	switch {
	case d < 0:
		return "now"
	case d < time.Hour:
		return fmt.Sprintf("in %ds", int(d.Round(time.Second)/time.Second))
	}
	return t.Local().Format("2006-01-02 15:04")
}

// FmtTime formats t in full (RFC 3339, seconds, local time) with its age.
func FmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	s := t.Local().Format(time.RFC3339)
	if d := Now().Sub(t); d >= 0 && d < 7*24*time.Hour {
		s += " (" + FmtAge(t) + ")"
	}
	return s
}

// Truncate shortens s to at most n runes, marking the cut with "…", and
// keeps it on one line.
func Truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// ShortDigest shortens a content digest for tables.
func ShortDigest(d string) string {
	if _, rest, ok := strings.Cut(d, ":"); ok {
		d = rest
	}
	if len(d) > 12 {
		return d[:12]
	}
	return OrDash(d)
}

// OrDash is s, or "-" when s is empty.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteRestoreTiming writes a restore's breakdown as table rows, indented
// by prefix.
func WriteRestoreTiming(w io.Writer, prefix string, rt *client.RestoreTiming) {
	Row(w, prefix+"restore setup", FmtMSCol(rt.SetupMS), "request to vCPUs resumed")
	Row(w, prefix+"  verify", FmtMSCol(rt.VerifyMS), "snapshot checks")
	if rt.VMM == "pooled" {
		Row(w, prefix+"  vmm start", FmtMSCol(rt.VMMStartMS), "started ahead by the VMM pool")
	} else {
		Row(w, prefix+"  vmm start", FmtMSCol(rt.VMMStartMS), "process start to control channel ready")
	}
	Row(w, prefix+"  load state", FmtMSCol(rt.LoadStateMS), "device state loaded")
	if rt.PullMS > 0 {
		Row(w, prefix+"  pull", FmtMSCol(rt.PullMS), "lazy snapshot's memory pulled first (this strategy needs the file)")
	}
	if rt.Source == "registry" {
		Row(w, prefix+"  memory", "  registry", "a lazy snapshot: pages from the registry through the chunk cache")
	}
	Row(w, prefix+"restore resume", FmtMSCol(rt.ResumeMS), "vCPUs resumed to agent answering")
}

// FmtMSCol formats milliseconds right-aligned for timing tables.
func FmtMSCol(ms float64) string {
	return fmt.Sprintf("%9.1f ms", ms)
}

// VMState is a VM's state as thaw shows it: the API's, but idle for a
// running VM the keep-alive pool keeps.
func VMState(v *client.VM) string {
	if v.Idle && v.State == "running" {
		return "idle"
	}
	return v.State
}

// FmtRouting reads "version 3 (90%), version 4 (10%)".
func FmtRouting(rs []client.Route) string {
	if len(rs) == 1 {
		return fmt.Sprintf("version %d", rs[0].Version)
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("version %d (%d%%)", r.Version, r.Weight)
	}
	return strings.Join(parts, ", ")
}
