package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"

	"github.com/thaw-dev/thaw/internal/termtext"
)

// What thaw prints: stdout carries only the command's document (a table,
// the daemon's JSON or YAML, ids with -q, an invocation's result), so it
// can be redirected and parsed; progress, timing, warnings and errors go
// to stderr. Errors are JSON (or YAML) there too when a document format
// was asked for.

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

// jsonToYAML converts a JSON document to block-style YAML, keys in their
// order. Strings that would read as another type are quoted; controls (C0,
// DEL, C1, NEL) are escaped in double quotes: YAML allows them nowhere raw,
// so nothing of a hostile string reaches a terminal raw either.
func jsonToYAML(b []byte) ([]byte, error) {
	var n yaml.Node
	// Raw C1 controls in a JSON string (which JSON allows) would be line
	// breaks to YAML's parser, NEL folded to a space: escaped first.
	if err := yaml.Unmarshal(termtext.JSON(b), &n); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	blockStyle(&n)
	var out bytes.Buffer
	// No line width: a folded line would change the string it is part of.
	d, err := yaml.NewDumper(&out, yaml.WithIndent(2), yaml.WithLineWidth(-1))
	if err == nil {
		err = d.Dump(&n)
	}
	if err == nil {
		err = d.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	return out.Bytes(), nil
}

// blockStyle clears the JSON flow and quoting styles the parser kept, so
// the encoder writes block YAML and quotes only where needed.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
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

// resultJSON is an invocation's result as stdout carries it: the JSON
// document indented, the controls JSON leaves raw escaped, never bytes
// that are not UTF-8: it parses as the handler's result.
func resultJSON(raw json.RawMessage) []byte {
	b := termtext.JSON([]byte(prettyJSON(raw)))
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	}
	return b
}

// stream is where a command's secondary output goes: stdout when asked
// for (toStdout), else stderr.
func (a *app) stream(toStdout bool) io.Writer {
	if toStdout {
		return a.stdout
	}
	return a.stderr
}
