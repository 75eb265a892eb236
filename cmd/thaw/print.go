package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/thaw-dev/thaw/internal/termtext"
)

// printOr prints v as a document with -o json or yaml, else the line
// format makes of args (nothing with -q).
func (a *app) printOr(v any, format string, args ...any) error {
	switch {
	case a.json:
		return a.printJSON(v)
	case a.quiet:
		return nil
	}
	fmt.Fprintf(a.stdout, format, args...)
	return nil
}

// printObject prints v as a document with -o json or yaml, else "headline
// id" (when there is a headline) and the rows fill writes, aligned. With
// -q it prints the id of what a command did something to (a headline's).
func (a *app) printObject(v any, headline, id string, fill func(w io.Writer)) error {
	switch {
	case a.json:
		return a.printJSON(v)
	case a.quiet:
		if headline != "" {
			a.quietID(id)
		}
		return nil
	}
	if headline != "" {
		fmt.Fprintf(a.stdout, "%s %s\n", headline, id)
	}
	w := newTable(a.stdout)
	fill(w)
	return w.Flush()
}

// printList prints a list as the API answers it: {"items": [...]}.
func printList[T any](a *app, items []T) error {
	if items == nil {
		items = []T{}
	}
	return a.printJSON(struct {
		Items []T `json:"items"`
	}{items})
}

// Output formats (-o).
const (
	formatJSON  = "json"
	formatYAML  = "yaml"
	formatTable = "table" // the default
	formatWide  = "wide"  // tables with every column
)

// resolveOutput checks -o, --json and -q together and sets a.json (a
// document format, JSON or YAML, is asked for) and a.wide. It may run
// again (errors are reported as it says): it gives the same answer.
func (a *app) resolveOutput() error {
	switch a.output {
	case "", formatJSON, formatYAML, formatTable, formatWide:
	default:
		return usagef("-o %q: use json, yaml, table or wide", a.output)
	}
	format := a.output
	if a.jsonFlag {
		if format != "" && format != formatJSON {
			return usagef("--json is -o json: it cannot go with -o %s", format)
		}
		format = formatJSON
	}
	a.format = format
	a.json = format == formatJSON || format == formatYAML
	a.wide = format == formatWide
	if a.quiet && a.json {
		return usagef("-q prints ids only: it cannot go with -o %s", format)
	}
	return nil
}

// printJSON prints v as the document format asks: indented JSON, DEL and
// C1 controls in strings escaped (termtext.JSON), or YAML (-o yaml) of the
// same document.
func (a *app) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return a.printDocument(b)
}

// printDocument prints a JSON document as printJSON does.
func (a *app) printDocument(b []byte) error {
	if a.format == formatYAML {
		y, err := jsonToYAML(b)
		if err != nil {
			return err
		}
		_, err = a.stdout.Write(y)
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "%s\n", termtext.JSON(b))
	return err
}

// quietID prints id on its own line (-q).
func (a *app) quietID(id string) {
	if id != "" {
		fmt.Fprintln(a.stdout, termtext.Line(id))
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

// report prints an error on stderr: "thaw: MESSAGE" and its hint, or with
// a document format, the error document. A hint that says where the usage
// is (usageLine) is a line of its own.
func (a *app) report(code, msg, requestID, hint string) {
	if a.json {
		var d errorDoc
		d.Error.Code, d.Error.Message, d.Error.RequestID, d.Error.Hint = code, msg, requestID, hint
		b, _ := json.Marshal(d)
		if a.format == formatYAML {
			if y, err := jsonToYAML(b); err == nil {
				a.stderr.Write(y)
				return
			}
		}
		fmt.Fprintf(a.stderr, "%s\n", termtext.JSON(b))
		return
	}
	// The daemon's messages may quote a guest (its console, an agent's
	// reply, QEMU's log): escaped, continuation lines marked.
	fmt.Fprintf(a.stderr, "thaw: %s\n", termtext.Inline(msg))
	switch {
	case hint == "":
	case strings.HasPrefix(hint, "Run '"):
		fmt.Fprintln(a.stderr, hint)
	default:
		fmt.Fprintf(a.stderr, "thaw: %s\n", hint)
	}
}

// warn prints a warning on stderr: in the default format before anything
// else of the command's, so a reader sees it first.
func (a *app) warn(format string, args ...any) {
	fmt.Fprintf(a.stderr, "thaw: warning: %s\n", termtext.Inline(fmt.Sprintf(format, args...)))
}

// stream is where a command's secondary output goes: stdout when asked
// for (toStdout), else stderr.
func (a *app) stream(toStdout bool) io.Writer {
	if toStdout {
		return a.stdout
	}
	return a.stderr
}
