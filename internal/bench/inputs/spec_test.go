package inputs

import (
	"fmt"
	"strings"
)

// Seconds is the y4m video's duration.
func (m Meta) Seconds() float64 {
	if m.FPS == 0 {
		return 0
	}
	return float64(m.Frames) / float64(m.FPS)
}

// Volume is the quantity that scale multiplies: pixels (jpeg), pixels ×
// frames (y4m), bytes (json, text), rows (table), nodes (edgelist), n²
// (npy); for the fixed functions, bytes.
func (m Meta) Volume() int {
	switch m.Format {
	case FormatJPEG:
		return m.Width * m.Height
	case FormatY4M:
		return m.Width * m.Height * m.Frames
	case FormatTable:
		return m.Rows
	case FormatEdgeList:
		return m.Nodes
	}
	if m.N > 0 {
		return m.N * m.N
	}
	return m.Bytes
}

// Summary is a one-line human description of the input's size.
func (m Meta) Summary() string {
	size := humanBytes(m.Bytes)
	switch m.Format {
	case FormatJPEG:
		return fmt.Sprintf("%d×%d JPEG q%d, %s", m.Width, m.Height, m.Quality, size)
	case FormatJSON:
		return fmt.Sprintf("%d records, %s JSON", m.Records, size)
	case FormatTable:
		return fmt.Sprintf("%d rows × %d cols (%d cells), %s JSON", m.Rows, m.Cols, m.Rows*m.Cols, size)
	case FormatText:
		return fmt.Sprintf("%s text", size)
	case FormatY4M:
		return fmt.Sprintf("%d×%d Y4M 4:2:0, %d frames @%d fps (%.2g s), %s", m.Width, m.Height, m.Frames, m.FPS, m.Seconds(), size)
	case FormatEdgeList:
		return fmt.Sprintf("%d nodes, %d edges (BA m=%d), %s uint32 pairs", m.Nodes, m.Edges, m.Attach, size)
	case FormatNPY:
		return fmt.Sprintf("2 × %d×%d float64 .npy, %s", m.N, m.N, size)
	}
	switch m.Function {
	case "read-list":
		return fmt.Sprintf("%d pass over the list built at start-up, %s JSON", m.Passes, size)
	case "mmap":
		return fmt.Sprintf("%d MiB, mode %q, %s JSON", m.MiB, m.Mode, size)
	}
	return size
}

func humanBytes(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Specs returns every function's Spec, in Table 2's order.
func Specs() []Spec { return append([]Spec(nil), specs...) }

// Table generates every function's A and B and returns their Meta, in Table
// 2's order.
func Table() ([]Row, error) {
	rows := make([]Row, 0, len(specs))
	for _, s := range specs {
		_, a, err := Generate(s.Function, "A", 1)
		if err != nil {
			return nil, err
		}
		_, b, err := Generate(s.Function, "B", s.BScale)
		if err != nil {
			return nil, err
		}
		rows = append(rows, Row{Function: s.Function, Description: s.Description, Scales: s.Scales, Paper: s.Paper, A: a, B: b})
	}
	return rows, nil
}

// Markdown renders Table rows for the docs.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| function | what it does | input A (record) | input B (test) | B/A | scale multiplies | paper (A / B) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		ratio := "same input"
		if !r.A.Fixed || r.A.SHA256 != r.B.SHA256 {
			ratio = fmt.Sprintf("%.2f× (%.2f× bytes)", float64(r.B.Volume())/float64(max(r.A.Volume(), 1)),
				float64(r.B.Bytes)/float64(max(r.A.Bytes, 1)))
		}
		fmt.Fprintf(&b, "| %s | %s | %s<br>`%s` | %s<br>`%s` | %s | %s | %s |\n",
			r.Function, r.Description, r.A.Summary(), r.A.Key, r.B.Summary(), r.B.Key, ratio, r.Scales, r.Paper)
	}
	return b.String()
}
