package main

import (
	"strings"
	"testing"
)

// TestGroupCommands: a command that only holds subcommands prints its
// help (its subcommands listed) and serves nothing; an argument is a usage
// error.
func TestGroupCommands(t *testing.T) {
	for group, sub := range map[string]string{"config": "check", "secrets": "rotate-key", "registry": "key"} {
		r := runThawd(t, nil, group)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, sub) || r.served != nil {
			t.Errorf("thawd %s: exit %d, stdout %q", group, r.code, r.stdout)
		}
		if r := runThawd(t, nil, group, "bogus"); r.code != exitUsage || r.served != nil {
			t.Errorf("thawd %s bogus: exit %d, want %d", group, r.code, exitUsage)
		}
	}
}
