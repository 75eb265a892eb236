package daemon

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/fnconfig"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// MaxCodeBytes bounds a function's unpacked code.
const MaxCodeBytes = 256 << 20

// FunctionSpec is a request to create a function. Exactly one of Directory
// (on the daemon's host) and Archive (a tar.gz of the function directory)
// is set.
type FunctionSpec struct {
	Name      string
	Directory string
	Archive   io.Reader
	MemoryMiB int
	VCPUs     int
	Network   vmnet.Policy // what its guests may reach; zero: nothing
	// MaxConcurrency bounds the function's live VMs (0: no limit of its own).
	MaxConcurrency int
	// KeepAliveS: seconds its VMs stay idle after a cold invocation (0:
	// the daemon's default, -1: never).
	KeepAliveS int
	// VMMPool: standby VMs per snapshot and strategy (0: the daemon's
	// default, -1: none); VMMPoolTTLS: seconds one waits (0: default).
	VMMPool     int
	VMMPoolTTLS int
	// Env is the function's environment, set at boot before its handler is
	// imported (so it is in its snapshots); Secrets maps environment
	// variable names to secrets, set only in VMs restored from a snapshot
	// (package fnconfig).
	Env     map[string]string
	Secrets map[string]string
	// Deps, if set, are the function's resolved dependencies as another
	// node recorded them (a registry pull): its requirements.txt is not
	// resolved again, and the layer must be here already.
	Deps *catalog.Deps
	// Strategy ("auto" or a strategy) and Refresh ("prepare", "traffic"
	// or "off") are its restore settings; "": the daemon's defaults.
	Strategy, Refresh string
}

// CreateFunction unpacks the code, digests it and builds its disk: an ext4
// image holding <name>/handler.py and friends, attached read-only to the
// function's VMs beside the shared root filesystem. A requirements.txt at
// the top of the code is resolved and built into the function's dependency
// layer (deps.go); a create that fails leaves no function behind.
func (s *Service) CreateFunction(ctx context.Context, spec FunctionSpec) (*catalog.Function, error) {
	netw, err := s.checkFunctionSpec(&spec)
	if err != nil {
		return nil, err
	}
	if err := CheckRestoreSettings(spec.Strategy, spec.Refresh); err != nil {
		return nil, err
	}
	release, err := s.reserveName(ctx, spec.Name)
	if err != nil {
		return nil, err
	}
	defer release()
	staging, err := s.stageCode(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	// No collection of the dependency cache until the function is recorded.
	endDeps := s.deps.Begin()
	defer func() { endDeps(); s.kickDepsGC() }()
	f, err := s.buildFunction(ctx, spec, netw, staging)
	if err != nil {
		return nil, err
	}
	if err := s.putFunction(ctx, f); err != nil {
		_ = os.RemoveAll(filepath.Dir(f.CodeDir))
		return nil, err
	}
	if err := s.adaptive.Created(ctx, f, spec.Strategy, spec.Refresh); err != nil {
		_ = s.db.DeleteFunction(context.WithoutCancel(ctx), f.Name)
		_ = os.RemoveAll(filepath.Dir(f.CodeDir))
		return nil, err
	}
	s.log.Info("function created", "function", f.Name, "digest", f.Digest[:12])
	return f, nil
}

// stageCode unpacks spec's code into a new staging directory under the
// functions directory (<staging>/code/<name>/handler.py and friends),
// which the caller removes.
func (s *Service) stageCode(ctx context.Context, spec FunctionSpec) (_ string, err error) {
	staging, err := os.MkdirTemp(s.functionsDir(), ".tmp-"+spec.Name+"-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(staging)
		}
	}()
	code := filepath.Join(staging, "code", spec.Name)
	if err := os.MkdirAll(code, 0o755); err != nil {
		return "", err
	}
	if spec.Directory != "" {
		err = s.copySource(ctx, code, spec.Directory)
	} else {
		err = extractArchive(code, spec.Archive)
	}
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(filepath.Join(code, "handler.py")); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: function %q has no handler.py at its top level", ErrInvalid, spec.Name)
	}
	return staging, nil
}

// buildFunction digests staged code and builds its disk and dependency
// layer (deps.go), then moves the staging directory to a directory of its
// own (functions/<name>-<id>: code/ and code.ext4) and returns the
// function's configuration, not yet recorded: the caller records it, or
// removes the directory, holding the dependency cache's collection off
// (Manager.Begin) until then.
func (s *Service) buildFunction(ctx context.Context, spec FunctionSpec, netw vmnet.Policy, staging string) (*catalog.Function, error) {
	code := filepath.Join(staging, "code", spec.Name)
	digest, size, err := digestTree(code)
	if err != nil {
		return nil, err
	}
	if err := fnconfig.WriteDisk(filepath.Join(staging, "code"), spec.Env); err != nil {
		return nil, err
	}
	digest = fnconfig.Digest(digest, spec.Env)
	disk := filepath.Join(staging, "code.ext4")
	if err := makeExt4(ctx, disk, filepath.Join(staging, "code")); err != nil {
		return nil, err
	}
	fdeps, err := s.functionDeps(ctx, code, spec.Deps)
	if err != nil {
		return nil, err
	}
	// A directory of its own: a create never touches one it did not make.
	final := filepath.Join(s.functionsDir(), newID(spec.Name+"-"))
	if err := os.Rename(staging, final); err != nil {
		return nil, err
	}
	s.log.Debug("function code built", "function", spec.Name, "digest", digest[:12], "bytes", size)
	return &catalog.Function{Name: spec.Name, Digest: digest, CodeDir: filepath.Join(final, "code"),
		Disk: filepath.Join(final, "code.ext4"), MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, CreatedAt: time.Now(),
		Network: catalog.Network{Egress: string(netw.Egress), Services: netw.Services}, MaxConcurrency: spec.MaxConcurrency, KeepAliveS: spec.KeepAliveS,
		VMMPool: spec.VMMPool, VMMPoolTTLS: spec.VMMPoolTTLS, Env: spec.Env, Secrets: spec.Secrets, Deps: fdeps}, nil
}

// reserveName claims name for one create at a time; release gives it back.
func (s *Service) reserveName(ctx context.Context, name string) (release func(), err error) {
	s.mu.Lock()
	busy := s.creating[name] != 0
	if !busy {
		s.creating[name] = -1
	}
	s.mu.Unlock()
	if busy {
		return nil, fmt.Errorf("function %q is being created or deployed: %w", name, ErrExists)
	}
	release = func() {
		s.mu.Lock()
		delete(s.creating, name)
		s.mu.Unlock()
	}
	if _, err := s.db.GetFunction(ctx, name); err == nil {
		release()
		return nil, fmt.Errorf("function %q: %w", name, ErrExists)
	}
	return release, nil
}

func skipName(name string) bool { return name == "__pycache__" || name == ".git" }

// extractArchive unpacks a tar.gz whose entries are relative paths inside
// the function directory.
func extractArchive(dst string, r io.Reader) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: archive is not gzip: %w", ErrInvalid, err)
	}
	tr := tar.NewReader(gz)
	var total int64
	var entries int
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: archive: %w", ErrInvalid, err)
		}
		name := filepath.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		// Every entry and every directory it implies counts.
		for p := name; p != "." && p != "/" && !seen[p]; p = filepath.Dir(p) {
			seen[p] = true
			if entries++; entries > MaxCodeEntries {
				return fmt.Errorf("%w: archive has more than %d files and directories", ErrInvalid, MaxCodeEntries)
			}
		}
		if len(name) > MaxCodePath || strings.Count(name, "/") >= MaxCodeDepth {
			return fmt.Errorf("%w: archive entry %.80q... is longer than %d bytes or nested deeper than %d directories", ErrInvalid, name, MaxCodePath, MaxCodeDepth)
		}
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%w: archive entry %q leaves the function directory", ErrInvalid, h.Name)
		}
		target := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("%w: archive entry %q: %w", ErrInvalid, h.Name, err)
			}
		case tar.TypeReg:
			if total += h.Size; total > MaxCodeBytes {
				return fmt.Errorf("%w: function code exceeds %d MiB", ErrInvalid, MaxCodeBytes>>20)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return fmt.Errorf("%w: archive entry %q: %w", ErrInvalid, h.Name, err)
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fs.FileMode(h.Mode).Perm()|0o444)
			if err != nil {
				return fmt.Errorf("%w: archive entry %q: %w", ErrInvalid, h.Name, err)
			}
			_, err = io.CopyN(out, tr, h.Size)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%w: archive entry %q: %w", ErrInvalid, h.Name, err)
			}
		default:
			return fmt.Errorf("%w: archive entry %q is not a regular file or directory", ErrInvalid, h.Name)
		}
	}
}

// digestTree hashes a code tree: every file's relative path, executable bit
// and contents, in sorted order. It is the function digest snapshots record.
func digestTree(root string) (string, int64, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		return "", 0, err
	}
	sort.Strings(files)
	h := sha256.New()
	var total int64
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		st, err := os.Stat(path)
		if err != nil {
			return "", 0, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", rel, st.Mode().Perm()&0o111, st.Size())
		f, err := os.Open(path)
		if err != nil {
			return "", 0, err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", 0, err
		}
		total += st.Size()
	}
	return hex.EncodeToString(h.Sum(nil)), total, nil
}

// makeExt4 builds an ext4 image of dir without mounting anything, sized
// for what it holds: a block per started 4 KiB of every file, directory
// blocks for their entries, and an inode for each file and directory
// (mkfs's default of one inode per 16 KiB runs out on many small files).
// The disk is read-only in the guest, so it has no journal and no reserve.
func makeExt4(ctx context.Context, image, dir string) error {
	var files, dirs, blocks int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs++
			n, _ := os.ReadDir(path)
			blocks += 1 + int64(len(n))*48/4096
			return nil
		}
		files++
		info, err := d.Info()
		if err != nil {
			return err
		}
		blocks += (info.Size() + 4095) / 4096
		return nil
	})
	if err != nil {
		return fmt.Errorf("build function disk: %w", err)
	}
	inodes := files + dirs + 64
	bytes := blocks*4096*11/10 + inodes*256 + 8<<20
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "thawfn", "-E", "root_owner=0:0",
		"-O", "^has_journal", "-m", "0", "-b", "4096", "-I", "256", "-N", strconv.FormatInt(inodes, 10),
		"-d", dir, image, strconv.FormatInt((bytes+1<<20-1)>>20, 10)+"M")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build function disk: mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// GetFunction returns a function.
func (s *Service) GetFunction(ctx context.Context, name string) (*catalog.Function, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	return s.db.GetFunction(ctx, name)
}

// ListFunctions returns every function.
func (s *Service) ListFunctions(ctx context.Context) ([]*catalog.Function, error) {
	return s.db.ListFunctions(ctx)
}

// checkFunctionSpec validates a new function (filling the defaults) and
// returns its network policy, normalized.
func (s *Service) checkFunctionSpec(spec *FunctionSpec) (vmnet.Policy, error) {
	if err := ValidName(spec.Name); err != nil {
		return vmnet.Policy{}, err
	}
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = s.cfg.DefaultMemoryMiB
	}
	if spec.VCPUs == 0 {
		spec.VCPUs = s.cfg.DefaultVCPUs
	}
	var errs []error
	if spec.MemoryMiB < 128 || spec.MemoryMiB > 16384 {
		errs = append(errs, fmt.Errorf("memory_mib %d must be between 128 and 16384", spec.MemoryMiB))
	}
	if spec.VCPUs < 1 || spec.VCPUs > 16 {
		errs = append(errs, fmt.Errorf("vcpus %d must be between 1 and 16", spec.VCPUs))
	}
	if spec.KeepAliveS < -1 || spec.KeepAliveS > 86400 {
		errs = append(errs, fmt.Errorf("keep_alive_s %d must be -1 (never), 0 (the daemon's default) or up to 86400", spec.KeepAliveS))
	}
	if spec.VMMPool < -1 || spec.VMMPool > 16 {
		errs = append(errs, fmt.Errorf("vmm_pool %d must be -1 (none), 0 (the daemon's default) or up to 16", spec.VMMPool))
	}
	if spec.VMMPoolTTLS < 0 || spec.VMMPoolTTLS > 86400 {
		errs = append(errs, fmt.Errorf("vmm_pool_ttl_s %d must be 0 (the daemon's default) or up to 86400", spec.VMMPoolTTLS))
	}
	if spec.MaxConcurrency < 0 || spec.MaxConcurrency > 4096 {
		errs = append(errs, fmt.Errorf("max_concurrency %d must be between 0 (no limit of its own) and 4096", spec.MaxConcurrency))
	}
	if (spec.Directory == "") == (spec.Archive == nil) {
		errs = append(errs, errors.New("give either a directory or an archive"))
	}
	netw, err := spec.Network.Normalize()
	if err != nil {
		errs = append(errs, err)
	}
	if err := fnconfig.Check(spec.Env, spec.Secrets); err != nil {
		errs = append(errs, err)
	} else if err := s.missingSecrets(spec.Secrets); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return netw, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	if s.net != nil {
		if err := s.net.CheckPolicy(netw); err != nil {
			return netw, fmt.Errorf("%w: %v", ErrForbidden, err)
		}
	}
	return netw, nil
}
