package deps

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Bounds of a requirements.txt.
const (
	MaxRequirementsBytes = 64 << 10
	MaxRequirements      = 256
)

// Requirement is one line of a requirements.txt: a project from the index,
// with an optional version specifier, extras and environment marker.
type Requirement struct {
	Line int    // 1-based line of the file it starts on
	Spec string // the requirement without options: "requests>=2", "igraph==1.0.0"
	Name string // the project's normalized name (PEP 503)
	// Version is the pinned version when Spec is exactly name==version
	// (no wildcard, extras or marker); "" otherwise.
	Version string
	// Hashes are the sha256 digests (hex) given with --hash.
	Hashes []string
}

// Pinned says whether the line names one version exactly.
func (r Requirement) Pinned() bool { return r.Version != "" }

// Requirements is a parsed requirements.txt.
type Requirements []Requirement

// Locked says whether rs is a complete lock: every line pinned and hashed,
// so it is installed as it is (pip --no-deps --require-hashes), without
// resolving anything.
func (rs Requirements) Locked() bool {
	if len(rs) == 0 {
		return false
	}
	for _, r := range rs {
		if !r.Pinned() || len(r.Hashes) == 0 {
			return false
		}
	}
	return true
}

// Lines are the requirements as given (Spec and hashes), one per line.
func (rs Requirements) Lines() []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Spec
		for _, h := range r.Hashes {
			out[i] += " --hash=sha256:" + h
		}
	}
	return out
}

var (
	// A PEP 508 name, then extras, a version specifier and a marker made
	// of ordinary characters (no URL: no '@', no '/').
	requirementRE = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[A-Za-z0-9._,\s-]*\])?\s*([<>=!~][<>=!~A-Za-z0-9.*+,\s_-]*)?\s*(;[A-Za-z0-9_.<>=!~'"(),\s-]*)?$`)
	pinRE         = regexp.MustCompile(`^==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)$`)
	hexRE         = regexp.MustCompile(`^[0-9a-f]{64}$`)
	normalizeRE   = regexp.MustCompile(`[-_.]+`)
)

// Normalize is a project name as PEP 503 compares it.
func Normalize(name string) string {
	return strings.ToLower(normalizeRE.ReplaceAllString(name, "-"))
}

// ParseRequirements reads a requirements.txt: one requirement a line,
// '#' comments, '\' continuations, and --hash=sha256:HEX options after a
// requirement. Everything that would make pip reach beyond the daemon's
// index (other indexes, URLs, local paths, editable installs, included
// files) and every other option is refused, naming the line.
func ParseRequirements(data []byte) (Requirements, error) {
	if len(data) > MaxRequirementsBytes {
		return nil, invalid(nil, "requirements.txt is larger than %d KiB", MaxRequirementsBytes>>10)
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return nil, invalid(nil, "requirements.txt is not UTF-8 text")
	}
	var out Requirements
	seen := map[string]int{}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := lines[i]
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + lines[i]
		}
		line = stripComment(line)
		if line == "" {
			continue
		}
		r, err := parseLine(line)
		if err != nil {
			return nil, invalid(nil, "requirements.txt line %d: %v", start, err)
		}
		r.Line = start
		if prev, dup := seen[r.Name]; dup {
			return nil, invalid(nil, "requirements.txt line %d: %s is already required on line %d; give each project once", start, r.Name, prev)
		}
		seen[r.Name] = start
		if out = append(out, r); len(out) > MaxRequirements {
			return nil, invalid(nil, "requirements.txt has more than %d requirements", MaxRequirements)
		}
	}
	if len(out) == 0 {
		return nil, invalid(nil, "requirements.txt names no package; remove it if the function needs none")
	}
	return out, nil
}

// stripComment drops a '#' comment (at the start, or after white space)
// and surrounding white space.
func stripComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			line = line[:i]
			break
		}
	}
	return strings.TrimSpace(line)
}

// parseLine parses one logical line: a requirement and its --hash options.
func parseLine(line string) (Requirement, error) {
	var r Requirement
	fields := strings.Fields(line)
	var spec []string
	for j := 0; j < len(fields); j++ {
		f := fields[j]
		if !strings.HasPrefix(f, "-") {
			if len(r.Hashes) > 0 {
				return r, fmt.Errorf("%q after --hash: options come after the requirement", f)
			}
			spec = append(spec, f)
			continue
		}
		val, ok := strings.CutPrefix(f, "--hash=")
		if !ok && f == "--hash" && j+1 < len(fields) {
			j++
			val, ok = fields[j], true
		}
		if !ok {
			return r, fmt.Errorf("option %s is not allowed: only --hash=sha256:... after a requirement (the daemon's --pip-index-url and --pip-find-links choose where packages come from)", optionName(f))
		}
		sum, isSHA := strings.CutPrefix(val, "sha256:")
		if !isSHA || !hexRE.MatchString(strings.ToLower(sum)) {
			return r, fmt.Errorf("--hash %q: give sha256:<64 hex digits>", val)
		}
		r.Hashes = append(r.Hashes, strings.ToLower(sum))
	}
	if len(spec) == 0 {
		return r, fmt.Errorf("--hash without a requirement")
	}
	r.Spec = strings.Join(spec, " ")
	if strings.ContainsAny(r.Spec, "@/\\:") {
		return r, fmt.Errorf("%q: only projects from the package index are allowed, not URLs, paths or direct references", r.Spec)
	}
	m := requirementRE.FindStringSubmatch(r.Spec)
	if m == nil {
		return r, fmt.Errorf("%q is not a requirement (name, optional [extras], version specifier and ; marker)", r.Spec)
	}
	r.Name = Normalize(m[1])
	if pin := pinRE.FindStringSubmatch(strings.TrimSpace(m[3])); pin != nil && m[2] == "" && m[4] == "" && !strings.Contains(pin[1], "*") {
		r.Version = pin[1]
	}
	sort.Strings(r.Hashes)
	r.Hashes = compactStrings(r.Hashes)
	return r, nil
}

// optionName is an option without its value, for messages.
func optionName(f string) string {
	if i := strings.IndexByte(f, '='); i > 0 {
		return f[:i]
	}
	return f
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
