package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

// PrintOr prints v as a document with -o json or yaml, else the line
// format makes of args (nothing with -q).
func (a *App) PrintOr(v any, format string, args ...any) error {
	switch {
	case a.JSON:
		return a.PrintJSON(v)
	case a.Quiet:
		return nil
	}
	fmt.Fprintf(a.Stdout, format, args...)
	return nil
}

// PrintObject prints v as a document with -o json or yaml, else "headline
// id" (when there is a headline) and the rows fill writes, aligned. With
// -q it prints the id of what a command did something to (a headline's).
func (a *App) PrintObject(v any, headline, id string, fill func(w io.Writer)) error {
	switch {
	case a.JSON:
		return a.PrintJSON(v)
	case a.Quiet:
		if headline != "" {
			a.QuietID(id)
		}
		return nil
	}
	if headline != "" {
		fmt.Fprintf(a.Stdout, "%s %s\n", headline, id)
	}
	w := output.NewTable(a.Stdout)
	fill(w)
	return w.Flush()
}

// PrintList prints a list as the API answers it: {"items": [...]}.
func PrintList[T any](a *App, items []T) error {
	if items == nil {
		items = []T{}
	}
	return a.PrintJSON(struct {
		Items []T `json:"items"`
	}{items})
}

// Output formats (-o).
const (
	FormatJSON  = "json"
	FormatYAML  = "yaml"
	FormatTable = "table" // the default
	FormatWide  = "wide"  // tables with every column
)

// ResolveOutput checks -o, --json and -q together and sets a.JSON (a
// document format, JSON or YAML, is asked for) and a.Wide. It may run
// again (errors are reported as it says): it gives the same answer.
func (a *App) ResolveOutput() error {
	switch a.Output {
	case "", FormatJSON, FormatYAML, FormatTable, FormatWide:
	default:
		return Usagef("-o %q: use json, yaml, table or wide", a.Output)
	}
	format := a.Output
	if a.JSONFlag {
		if format != "" && format != FormatJSON {
			return Usagef("--json is -o json: it cannot go with -o %s", format)
		}
		format = FormatJSON
	}
	a.Format = format
	a.JSON = format == FormatJSON || format == FormatYAML
	a.Wide = format == FormatWide
	if a.Quiet && a.JSON {
		return Usagef("-q prints ids only: it cannot go with -o %s", format)
	}
	return nil
}

// PrintJSON prints v as the document format asks: indented JSON, DEL and
// C1 controls in strings escaped (termtext.JSON), or YAML (-o yaml) of the
// same document.
func (a *App) PrintJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return a.PrintDocument(b)
}

// PrintDocument prints a JSON document as PrintJSON does.
func (a *App) PrintDocument(b []byte) error {
	if a.Format == FormatYAML {
		y, err := output.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = a.Stdout.Write(y)
		return err
	}
	_, err := fmt.Fprintf(a.Stdout, "%s\n", termtext.JSON(b))
	return err
}

// QuietID prints id on its own line (-q).
func (a *App) QuietID(id string) {
	if id != "" {
		fmt.Fprintln(a.Stdout, termtext.Line(id))
	}
}

// errorDoc is an error as thaw prints it with a document format: the
// daemon's error body, with a hint when thaw has one.
type errorDoc struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"request_id,omitempty"`
		Hint      string `json:"hint,omitempty"`
	} `json:"error"`
}

// Report prints an error on stderr: "thaw: MESSAGE" and its hint, or with
// a document format, the error document. A hint that says where the usage
// is (UsageLine) is a line of its own.
func (a *App) Report(code, msg, requestID, hint string) {
	if a.JSON {
		var d errorDoc
		d.Error.Code, d.Error.Message, d.Error.RequestID, d.Error.Hint = code, msg, requestID, hint
		b, _ := json.Marshal(d)
		if a.Format == FormatYAML {
			if y, err := output.JSONToYAML(b); err == nil {
				a.Stderr.Write(y)
				return
			}
		}
		fmt.Fprintf(a.Stderr, "%s\n", termtext.JSON(b))
		return
	}
	// The daemon's messages may quote a guest (its console, an agent's
	// reply, QEMU's log): escaped, continuation lines marked.
	fmt.Fprintf(a.Stderr, "thaw: %s\n", termtext.Inline(msg))
	switch {
	case hint == "":
	case strings.HasPrefix(hint, "Run '"):
		fmt.Fprintln(a.Stderr, hint)
	default:
		fmt.Fprintf(a.Stderr, "thaw: %s\n", hint)
	}
}

// Warn prints a warning on stderr: in the default format before anything
// else of the command's, so a reader sees it first.
func (a *App) Warn(format string, args ...any) {
	fmt.Fprintf(a.Stderr, "thaw: warning: %s\n", termtext.Inline(fmt.Sprintf(format, args...)))
}

// Stream is where a command's secondary output goes: stdout when asked
// for (toStdout), else stderr.
func (a *App) Stream(toStdout bool) io.Writer {
	if toStdout {
		return a.Stdout
	}
	return a.Stderr
}
