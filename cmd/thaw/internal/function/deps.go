package function

import (
	"io"
	"strings"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

// writeDeps writes a function's dependencies as rows: what its
// requirements.txt asked for, every wheel installed, and the layer.
func writeDeps(w io.Writer, d *client.FunctionDeps) {
	if d == nil {
		output.Row(w, "Requirements:", "none (no requirements.txt)")
		return
	}
	for i, r := range d.Requested {
		label := ""
		if i == 0 {
			label = "Requirements:"
		}
		output.Row(w, label, withShortHash(r))
	}
	for i, r := range d.Resolved {
		label := ""
		if i == 0 {
			label = "Installed:"
		}
		output.Row(w, label, withShortHash(r))
	}
	output.Row(w, "Layer:", output.ShortDigest(d.Layer)+" ("+d.Format+", "+output.FmtBytes(d.LayerBytes)+")")
}

// withShortHash shortens a line's --hash=sha256:HEX options for reading
// (the JSON output has them whole).
func withShortHash(line string) string {
	fields := strings.Fields(line)
	for i, f := range fields {
		if sum, ok := strings.CutPrefix(f, "--hash=sha256:"); ok {
			fields[i] = "sha256:" + output.ShortDigest(sum)
		}
	}
	return strings.Join(fields, " ")
}
