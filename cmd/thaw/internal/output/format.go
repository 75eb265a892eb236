package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"

	"github.com/thaw-dev/thaw/internal/termtext"
)

// What thaw prints: stdout carries only the command's document (a table,
// the daemon's JSON or YAML, ids with -q, an invocation's result), so it
// can be redirected and parsed; progress, timing, warnings and errors go
// to stderr. Errors are JSON (or YAML) there too when a document format
// was asked for.

// JSONToYAML converts a JSON document to block-style YAML, keys in their
// order. Strings that would read as another type are quoted; controls (C0,
// DEL, C1, NEL) are escaped in double quotes: YAML allows them nowhere raw,
// so nothing of a hostile string reaches a terminal raw either.
func JSONToYAML(b []byte) ([]byte, error) {
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

// ResultJSON is an invocation's result as stdout carries it: the JSON
// document indented, the controls JSON leaves raw escaped, never bytes
// that are not UTF-8: it parses as the handler's result.
func ResultJSON(raw json.RawMessage) []byte {
	b := termtext.JSON([]byte(PrettyJSON(raw)))
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	}
	return b
}

// PrettyJSON indents a JSON document; an empty one is null.
func PrettyJSON(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "null"
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}
