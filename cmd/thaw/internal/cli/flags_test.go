package cli_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// TestAssignmentsUsageErrors: a bad --env or --secret item is a usage
// error that names the flag and quotes the item whole.
func TestAssignmentsUsageErrors(t *testing.T) {
	m, err := cli.Assignments("env", []string{"A=1", "B=x=y"})
	if err != nil || len(m) != 2 || m["B"] != "x=y" {
		t.Fatalf("got %v, %v", m, err)
	}
	long := strings.Repeat("x", 100)
	for _, c := range []struct {
		flag  string
		items []string
		want  string
	}{
		{"env", []string{"NOVALUE"}, `--env "NOVALUE": want NAME=VALUE`},
		{"secret", []string{"=db"}, `--secret "=db": want NAME=VALUE`},
		{"env", []string{"A=1", "A=2"}, "--env A is given twice"},
		{"env", []string{long}, `--env "` + long + `": want NAME=VALUE`},
	} {
		_, err := cli.Assignments(c.flag, c.items)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || err.Error() != c.want {
			t.Errorf("%.40q: error %v, want the usage error %q", c.items, err, c.want)
		}
	}
}
