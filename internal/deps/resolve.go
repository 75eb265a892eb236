package deps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultIndexURL is pip's own default, PyPI's simple index.
const DefaultIndexURL = "https://pypi.org/simple"

// NoIndex as the index URL: only the find-links locations are used.
const NoIndex = "none"

// Defaults of a resolver's network bounds.
const (
	DefaultTimeout = 15 * time.Second // pip --timeout: one connect or read
	DefaultRetries = 1                // pip --retries
	// pipDeadline bounds one pip run, whatever it does.
	pipDeadline  = 10 * time.Minute
	maxPipOutput = 1 << 20
)

// Resolver resolves requirements into a Lock with pip, downloading wheels
// of the guest's platform into its cache.
type Resolver struct {
	Python    string   // the host interpreter that runs pip ("python3")
	IndexURL  string   // "" DefaultIndexURL; NoIndex for find-links only
	FindLinks []string // directories or URLs of wheels, searched besides the index
	Timeout   time.Duration
	Retries   int
	Cache     *WheelCache
	TmpDir    string // pip's scratch space (removed after each run)

	checkMu sync.Mutex
	checked bool // the interpreter passed CheckPython
}

func (r *Resolver) indexURL() string {
	if r.IndexURL == "" {
		return DefaultIndexURL
	}
	return r.IndexURL
}

func (r *Resolver) timeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultTimeout
	}
	return r.Timeout
}

// CheckPython checks that the host interpreter is CPython 3.11 (pip
// evaluates environment markers with it, and it precompiles bytecode for
// the guest) and has pip; once it passed it is not asked again.
func (r *Resolver) CheckPython(ctx context.Context) error {
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	if r.checked {
		return nil
	}
	if err := checkPython(ctx, r.Python); err != nil {
		return err
	}
	r.checked = true
	return nil
}

func checkPython(ctx context.Context, python string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c",
		"import sys, importlib.util; print(sys.implementation.name, sys.version_info[0], sys.version_info[1], importlib.util.MAGIC_NUMBER.hex())").Output()
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrHostPython, python, err)
	}
	got := strings.Fields(string(out))
	if len(got) != 4 || got[0] != "cpython" || got[1]+"."+got[2] != PythonVersion || got[3] != PycMagic {
		return fmt.Errorf("%w: %s is %s; it must be CPython %s, the guest's (pip evaluates environment markers with it, and it precompiles the layer's bytecode)",
			ErrHostPython, python, strings.TrimSpace(string(out)), PythonVersion)
	}
	if out, err := exec.CommandContext(ctx, python, "-m", "pip", "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s has no pip (apt-get install python3-pip): %s", ErrHostPython, python, bytes.TrimSpace(out))
	}
	return nil
}

// Resolve turns requirements into a lock. A complete lock whose wheels
// are all cached needs no pip and no index; otherwise pip downloads the
// wheels (resolving dependencies unless the requirements are a complete
// lock) and each is hashed, checked against the hashes given for it and
// the guest's tags, and cached. When pip fails, the index is read to say
// why (diagnose).
func (r *Resolver) Resolve(ctx context.Context, reqs Requirements) (*Lock, error) {
	if l, ok := r.fromCache(reqs); ok {
		return l, nil
	}
	if err := r.CheckPython(ctx); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.TmpDir, 0o700); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(r.TmpDir, "pip-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	out, err := r.download(ctx, reqs, work)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, r.diagnose(ctx, reqs, out, err)
	}
	return r.collect(reqs, filepath.Join(work, "wheels"))
}

// fromCache is the lock of a complete lock whose wheels are all cached.
func (r *Resolver) fromCache(reqs Requirements) (*Lock, bool) {
	if !reqs.Locked() || r.Cache == nil {
		return nil, false
	}
	l := &Lock{}
	for _, q := range reqs {
		found := false
		for _, h := range q.Hashes {
			if p, ok := r.Cache.Lookup(h); ok {
				wn, err := ParseWheelName(filepath.Base(p))
				if err != nil || wn.Name != q.Name || wn.Version != q.Version || !wn.Compatible() {
					continue
				}
				l.Pins = append(l.Pins, Pin{Name: q.Name, Version: q.Version, SHA256: h, File: wn.File})
				found = true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	l.sort()
	return l, true
}

// download runs pip download into work/wheels; it returns pip's output.
func (r *Resolver) download(ctx context.Context, reqs Requirements, work string) (string, error) {
	locked := reqs.Locked()
	var in strings.Builder
	for _, q := range reqs {
		in.WriteString(q.Spec)
		if locked {
			for _, h := range q.Hashes {
				in.WriteString(" --hash=sha256:" + h)
			}
		}
		in.WriteString("\n")
	}
	reqFile := filepath.Join(work, "requirements.txt")
	if err := os.WriteFile(reqFile, []byte(in.String()), 0o600); err != nil {
		return "", err
	}
	args := []string{"-m", "pip", "download", "--disable-pip-version-check", "--no-input", "--isolated",
		"--no-cache-dir", "--progress-bar", "off",
		"--timeout", strconv.Itoa(int(r.timeout().Seconds() + 0.5)), "--retries", strconv.Itoa(r.Retries),
		"-d", filepath.Join(work, "wheels"), "-r", reqFile}
	args = append(args, PipTargetArgs()...)
	if locked {
		args = append(args, "--no-deps", "--require-hashes")
	}
	if r.indexURL() == NoIndex {
		args = append(args, "--no-index")
	} else {
		args = append(args, "--index-url", r.indexURL())
	}
	for _, f := range r.FindLinks {
		args = append(args, "--find-links", f)
	}
	ctx, cancel := context.WithTimeout(ctx, pipDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.Python, args...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "HOME="+work, "TMPDIR="+work, "PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1")
	var buf limitedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// collect hashes and checks what pip downloaded and moves it into the
// cache.
func (r *Resolver) collect(reqs Requirements, dir string) (*Lock, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("pip downloaded nothing: %w", err)
	}
	want := map[string]Requirement{}
	for _, q := range reqs {
		want[q.Name] = q
	}
	l := &Lock{}
	seen := map[string]string{}
	for _, e := range ents {
		wn, err := ParseWheelName(e.Name())
		if err != nil || !e.Type().IsRegular() {
			return nil, invalid(ErrSdistOnly, "pip fetched %s, which is not a wheel", e.Name())
		}
		if !wn.Compatible() {
			return nil, invalid(ErrNoWheel, "%s %s: pip fetched %s, which is not for CPython %s on manylinux %s", wn.Name, wn.Version, wn.File, PythonVersion, Arch)
		}
		if prev, dup := seen[wn.Name]; dup {
			return nil, invalid(ErrConflict, "pip fetched two wheels of %s: %s and %s", wn.Name, prev, wn.File)
		}
		seen[wn.Name] = wn.File
		sum, _, err := r.Cache.Add(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if q, ok := want[wn.Name]; ok && len(q.Hashes) > 0 && !slices.Contains(q.Hashes, sum) {
			return nil, invalid(ErrHashMismatch, "%s %s: %s has sha256 %s, which is not a hash requirements.txt line %d gives",
				wn.Name, wn.Version, wn.File, sum, q.Line)
		}
		l.Pins = append(l.Pins, Pin{Name: wn.Name, Version: wn.Version, SHA256: sum, File: wn.File})
	}
	for _, q := range reqs {
		if _, ok := seen[q.Name]; !ok {
			return nil, invalid(ErrUnknownPackage, "%s: pip resolved the requirements without a wheel of it", q.Spec)
		}
	}
	l.sort()
	return l, nil
}

// limitedBuffer keeps the first maxPipOutput bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := maxPipOutput - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var errPipFailed = errors.New("pip failed")
