package deps

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// LayerVersion is the version of the layer layout (what Layers.Build puts
// where, how it precompiles); it is part of every layer's digest, so a
// change builds new layers instead of reusing old ones.
const LayerVersion = 1

// Pin is one resolved distribution: a wheel, by its hash.
type Pin struct {
	Name    string // normalized
	Version string
	SHA256  string
	File    string // the wheel's file name ("" when not known yet)
}

// Line is the pin as a requirement line: name==version --hash=sha256:HEX.
func (p Pin) Line() string { return p.Name + "==" + p.Version + " --hash=sha256:" + p.SHA256 }

// Lock is a resolved set of wheels, one per project, sorted by name.
type Lock struct {
	Pins []Pin
}

// Lines are the lock's requirement lines (a requirements.txt pip installs
// as it is, with --require-hashes).
func (l *Lock) Lines() []string {
	out := make([]string, len(l.Pins))
	for i, p := range l.Pins {
		out[i] = p.Line()
	}
	return out
}

// Digest names the layer of this lock in format: the SHA-256 of the layer
// version, the format and the sorted lines.
func (l *Lock) Digest(format Format) string {
	h := sha256.New()
	fmt.Fprintf(h, "thaw-deps-layer/%d/%s\n", LayerVersion, format)
	lines := l.Lines()
	sort.Strings(lines)
	for _, line := range lines {
		fmt.Fprintf(h, "%s\n", line)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (l *Lock) sort() {
	sort.Slice(l.Pins, func(i, j int) bool { return l.Pins[i].Name < l.Pins[j].Name })
}

var lockLineRE = regexp.MustCompile(`^([a-z0-9][a-z0-9-]*)==([A-Za-z0-9.+!_-]+) --hash=sha256:([0-9a-f]{64})$`)

// ParseLock reads lines written by Lock.Lines (a function's stored lock,
// a registry record's).
func ParseLock(lines []string) (*Lock, error) {
	if len(lines) == 0 || len(lines) > MaxRequirements*4 {
		return nil, invalid(nil, "a lock has 1 to %d lines, not %d", MaxRequirements*4, len(lines))
	}
	l := &Lock{}
	seen := map[string]bool{}
	for _, line := range lines {
		m := lockLineRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || seen[m[1]] || Normalize(m[1]) != m[1] {
			return nil, invalid(nil, "lock line %q: want one name==version --hash=sha256:HEX per project", line)
		}
		seen[m[1]] = true
		l.Pins = append(l.Pins, Pin{Name: m[1], Version: m[2], SHA256: m[3]})
	}
	l.sort()
	return l, nil
}
