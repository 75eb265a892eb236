package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

// TestYAMLOutput: -o yaml prints the same document as -o json, hostile
// text included, and nothing of it raw on the terminal.
func TestYAMLOutput(t *testing.T) {
	d := newHostileDaemon(t)
	for _, args := range [][]string{
		{"invoke", "evil"},
		{"invoke", "good"},
		{"invocations"},
		{"vm", "list", "--state", "all"},
		{"vm", "get", "vm-bad"},
		{"operation", "list"},
	} {
		rj := d.thaw(t, append([]string{"-o", "json"}, args...)...)
		ry := d.thaw(t, append([]string{"-o", "yaml"}, args...)...)
		if rj.code != ry.code {
			t.Errorf("%v: exit codes %d (json) and %d (yaml)", args, rj.code, ry.code)
		}
		what := "-o yaml " + strings.Join(args, " ")
		wantTerminalSafe(t, what+": stdout", ry.stdout)
		wantTerminalSafe(t, what+": stderr", ry.stderr)
		if got, want := yamlValue(t, what, ry.stdout), jsonValue(t, "-o json", rj.stdout); !reflect.DeepEqual(got, want) {
			t.Errorf("%s decodes to\n%v\nwant (-o json)\n%v", what, got, want)
		}
		if strings.Contains(ry.stdout, "{\n") || strings.HasPrefix(ry.stdout, "{") {
			t.Errorf("%s is not block YAML:\n%s", what, ry.stdout)
		}
	}
	// Strings that would read as other types stay strings.
	y, err := output.JSONToYAML([]byte(`{"a": "true", "b": "1.5", "c": "", "d": "null", "e": "- x", "f": 2, "g": null, "h": [], "i": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": "true", "b": "1.5", "c": "", "d": "null", "e": "- x", "f": 2.0, "g": nil, "h": []any{}, "i": map[string]any{}}
	if got := yamlValue(t, "converted", string(y)); !reflect.DeepEqual(got, want) {
		t.Errorf("converted\n%s\ndecodes to %v, want %v", y, got, want)
	}
}
