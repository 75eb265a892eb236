package main

import (
	"reflect"
	"strings"
	"testing"
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
}
