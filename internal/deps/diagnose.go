package deps

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var (
	// pip's words for a requirement it found no file for.
	noVersionRE = regexp.MustCompile(`(?m)^ERROR: Could not find a version that satisfies the requirement (.+?) \(from versions: ([^)]*)\)`)
	conflictRE  = regexp.MustCompile(`(?m)^ERROR: Cannot install (.+?) because these package versions have conflicting dependencies\.`)
	// Connection failures pip retried and gave up on.
	networkRE = regexp.MustCompile(`(?m)(NewConnectionError|ConnectTimeoutError|ReadTimeoutError|Connection refused|Read timed out|Failed to establish a new connection|Max retries exceeded|Name or service not known|Temporary failure in name resolution|ProtocolError|RemoteDisconnected)[^\n]*`)
	hashRE    = regexp.MustCompile(`(?m)^ERROR: THESE PACKAGES DO NOT MATCH THE HASHES`)
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*`)
	// pip names a requirement of the file it was given by its line.
	reqFileRE = regexp.MustCompile(`-r \S+ \(line (\d+)\)`)
)

// diagnose says why pip failed: the index did not answer, the
// requirements conflict, or a requirement has no wheel for the guest, in
// which case the index (or the find-links locations) is read to tell an
// unknown project from one with only source distributions, with wheels for
// other platforms only, or without the version asked for.
func (r *Resolver) diagnose(ctx context.Context, reqs Requirements, out string, runErr error) error {
	if m := networkRE.FindString(out); m != "" && !strings.Contains(out, "conflicting dependencies") {
		return fmt.Errorf("%w: %s did not answer within %s (tried %d times): %s", ErrIndexUnavailable,
			r.sources(), r.timeout(), r.Retries+1, truncate(m, 300))
	}
	out = reqFileRE.ReplaceAllStringFunc(out, func(ref string) string {
		n, _ := strconv.Atoi(reqFileRE.FindStringSubmatch(ref)[1])
		if n >= 1 && n <= len(reqs) {
			return reqs[n-1].Spec
		}
		return ref
	})
	if m := conflictRE.FindStringSubmatch(out); m != nil {
		return invalid(ErrConflict, "%s: %s", m[1], conflictCause(out))
	}
	if hashRE.MatchString(out) {
		return invalid(ErrHashMismatch, "a downloaded file does not have a hash requirements.txt gives: %s", hashMismatches(out))
	}
	if m := noVersionRE.FindStringSubmatch(out); m != nil {
		return r.explainMissing(ctx, reqs, m[1], m[2])
	}
	return invalid(nil, "pip could not resolve the requirements (%v): %s", runErr, pipErrors(out))
}

// explainMissing classifies a requirement pip found no wheel for. req is
// pip's text ("name==1.0", "urllib3<3 (from requests)"), versions the
// versions it found with wheels for the guest.
func (r *Resolver) explainMissing(ctx context.Context, reqs Requirements, req, versions string) error {
	name := Normalize(nameRE.FindString(req))
	version := ""
	for _, q := range reqs {
		if q.Name == name {
			version = q.Version
		}
	}
	what := req
	if i := strings.Index(req, " (from "); i > 0 {
		what = req[:i] + " (required by " + strings.TrimSuffix(req[i+7:], ")") + ")"
	}
	files, found, err := r.projectFiles(ctx, name)
	if err != nil {
		return fmt.Errorf("%w: %s: reading the index to find out why pip found no wheel: %v", ErrIndexUnavailable, what, err)
	}
	if !found {
		return invalid(ErrUnknownPackage, "%s: no project %q on %s", what, name, r.sources())
	}
	byVersion := map[string][]string{}
	for _, f := range files {
		if v, ok := fileVersion(f, name); ok {
			byVersion[v] = append(byVersion[v], f)
		}
	}
	if version != "" {
		if _, ok := byVersion[version]; !ok {
			return invalid(ErrNoVersion, "%s: %s has no release %s (releases: %s)", what, name, version, listVersions(byVersion))
		}
		return classifyFiles(what, name+" "+version, r.sources(), byVersion[version])
	}
	if v := strings.TrimSpace(versions); v != "" && v != "none" {
		return invalid(ErrNoVersion, "%s: no release of %s that matches has a wheel for CPython %s on manylinux %s (releases with such wheels: %s)",
			what, name, PythonVersion, Arch, v)
	}
	return classifyFiles(what, name, r.sources(), files)
}

// classifyFiles says why none of files (one project's, of one version or
// all) serves the guest: only sdists, or wheels for others only.
func classifyFiles(what, subject, where string, files []string) error {
	var wheels, sdists []string
	for _, f := range files {
		if strings.HasSuffix(f, ".whl") {
			wheels = append(wheels, f)
		} else {
			sdists = append(sdists, f)
		}
	}
	sort.Strings(wheels)
	sort.Strings(sdists)
	if len(wheels) == 0 {
		return invalid(ErrSdistOnly, "%s: %s has only source distributions on %s (%s); thaw installs wheels only, since building one runs the package's code",
			what, subject, where, listFiles(sdists))
	}
	return invalid(ErrNoWheel, "%s: no wheel of %s on %s is for CPython %s on manylinux (glibc <= 2.%d) %s; its wheels: %s",
		what, subject, where, PythonVersion, GlibcMinor, Arch, listFiles(wheels))
}

// conflictCause is pip's "The conflict is caused by:" paragraph, in a line.
func conflictCause(out string) string {
	_, rest, ok := strings.Cut(out, "The conflict is caused by:")
	if !ok {
		return pipErrors(out)
	}
	var causes []string
	for _, line := range strings.Split(rest, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			if len(causes) > 0 {
				break
			}
			continue
		}
		causes = append(causes, line)
	}
	return strings.Join(causes, "; ")
}

// hashMismatches is pip's list of files whose hashes did not match, in a
// line: "name==version from URL: Expected sha256 X Got Y".
func hashMismatches(out string) string {
	_, rest, _ := strings.Cut(out, "THESE PACKAGES DO NOT MATCH THE HASHES")
	var parts []string
	for _, line := range strings.Split(rest, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasSuffix(line, ":") && strings.Contains(line, "=="):
			parts = append(parts, strings.TrimSuffix(line, ":"))
		case strings.HasPrefix(line, "Expected") || strings.HasPrefix(line, "Got"):
			if len(parts) > 0 {
				parts[len(parts)-1] += "; " + strings.Join(strings.Fields(line), " ")
			}
		}
	}
	if len(parts) == 0 {
		return pipErrors(out)
	}
	return truncate(strings.Join(parts, "; "), 1000)
}

// pipErrors are pip's ERROR lines, or its last lines.
func pipErrors(out string) string {
	var errs []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ERROR: ") {
			errs = append(errs, strings.TrimPrefix(line, "ERROR: "))
		}
	}
	if len(errs) == 0 {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		errs = lines[max(0, len(lines)-3):]
	}
	return truncate(strings.Join(errs, "; "), 1000)
}

// fileVersion is the version of a distribution file of project name.
func fileVersion(file, name string) (string, bool) {
	if wn, err := ParseWheelName(file); err == nil {
		return wn.Version, wn.Name == name
	}
	base := file
	for _, ext := range []string{".tar.gz", ".tar.bz2", ".tar.xz", ".zip", ".tgz", ".tar"} {
		if b, ok := strings.CutSuffix(file, ext); ok {
			base = b
			break
		}
	}
	for i := len(base) - 1; i > 0; i-- {
		if base[i] == '-' && Normalize(base[:i]) == name {
			return base[i+1:], true
		}
	}
	return "", false
}

func listVersions(byVersion map[string][]string) string {
	var vs []string
	for v := range byVersion {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	return listFiles(vs)
}

// listFiles joins up to 8 names, saying how many more there are.
func listFiles(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	const show = 8
	if len(names) <= show {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:show], ", "), len(names)-show)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// sources names where packages come from, for messages.
func (r *Resolver) sources() string {
	var s []string
	if r.indexURL() != NoIndex {
		s = append(s, "the index "+r.indexURL())
	}
	for _, f := range r.FindLinks {
		s = append(s, "find-links "+f)
	}
	return strings.Join(s, " and ")
}
