package deps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/atomicfile"
)

// Format is a layer's file system.
type Format string

// Layer formats. erofs is the default: smaller images and faster first
// imports in the guest (docs/bench/deps.md); ext4 needs no erofs module.
const (
	FormatErofs Format = "erofs"
	FormatExt4  Format = "ext4"
)

// ParseFormat checks a format name.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatErofs, FormatExt4:
		return f, nil
	}
	return "", fmt.Errorf("layer format %q: want erofs or ext4", s)
}

// Files of a layer directory, <dir>/layers/<digest>/.
const (
	ImageFile = "layer.img"
	infoFile  = "layer.json"
	// treeInfoFile is in the layer's tree, for the curious in the guest.
	treeInfoFile = "thaw-layer.json"
)

// Layer is a built dependency layer.
type Layer struct {
	Digest  string    `json:"digest"` // Lock.Digest: names the layer
	Format  Format    `json:"format"`
	SHA256  string    `json:"sha256"` // of the image file
	Bytes   int64     `json:"bytes"`  // the image's size
	Lines   []string  `json:"lines"`  // the lock
	Files   int       `json:"files"`  // files in the tree
	BuiltAt time.Time `json:"built_at"`
	BuildMS float64   `json:"build_ms"`
	// Steps are the build's steps in ms: install (unpack and check the
	// wheels), compile (bytecode), image (mkfs), publish (hash, sync,
	// rename).
	Steps map[string]float64 `json:"steps,omitempty"`
	// Path is the image file (not stored).
	Path string `json:"-"`
}

// Layers is the layer store: <dir>/layers/<digest>/{layer.img,layer.json},
// built under <dir>/layers/.tmp-* and renamed into place.
type Layers struct {
	dir    string
	wheels *WheelCache
	python string
	format Format
	// compression of erofs images: "none" (default), "lz4" or "lz4hc"; a
	// measurement knob (docs/bench/deps.md), not part of the digest.
	compression string
	limits      Limits

	mu       sync.Mutex
	building map[string]*sync.Mutex
}

// Dir is the directory holding the layers.
func (ls *Layers) Dir() string { return ls.dir }

// Format is the format new layers are built in.
func (ls *Layers) Format() Format { return ls.format }

// Get returns the layer by digest, or ErrLayerMissing.
func (ls *Layers) Get(digest string) (*Layer, error) {
	if !hexRE.MatchString(digest) {
		return nil, fmt.Errorf("%w: %q is not a layer digest", ErrLayerMissing, digest)
	}
	dir := filepath.Join(ls.dir, digest)
	b, err := os.ReadFile(filepath.Join(dir, infoFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrLayerMissing, digest)
	}
	if err != nil {
		return nil, err
	}
	var l Layer
	if err := json.Unmarshal(b, &l); err != nil || l.Digest != digest {
		return nil, fmt.Errorf("%w: %s: its description is damaged", ErrLayerMissing, digest)
	}
	l.Path = filepath.Join(dir, ImageFile)
	st, err := os.Stat(l.Path)
	if err != nil || st.Size() != l.Bytes {
		return nil, fmt.Errorf("%w: %s: image missing or truncated", ErrLayerMissing, digest)
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // last use, for eviction
	return &l, nil
}

// Build returns the layer of lock, building it unless it exists (built
// says which). Every wheel must be in the cache (Resolve put it there).
// Concurrent builds of one digest build once; a failed build leaves
// nothing behind.
func (ls *Layers) Build(ctx context.Context, lock *Lock) (l *Layer, built bool, err error) {
	digest := lock.Digest(ls.format)
	mu := ls.lockFor(digest)
	mu.Lock()
	defer mu.Unlock()
	if l, err := ls.Get(digest); err == nil {
		return l, false, nil
	}
	t0 := time.Now()
	step := stepClock(t0)
	staging, err := os.MkdirTemp(ls.dir, ".tmp-"+digest[:12]+"-")
	if err != nil {
		return nil, false, fmt.Errorf("build layer: %w", err)
	}
	defer os.RemoveAll(staging)
	tree := filepath.Join(staging, "tree")
	if err := ls.installTree(ctx, lock, tree); err != nil {
		return nil, false, err
	}
	steps := map[string]float64{"install": step()}
	if err := precompile(ctx, ls.python, tree); err != nil {
		return nil, false, err
	}
	steps["compile"] = step()
	files, err := normalizeTree(tree)
	if err != nil {
		return nil, false, err
	}
	l = &Layer{Digest: digest, Format: ls.format, Lines: lock.Lines(), Files: files, BuiltAt: time.Now().UTC(), Steps: steps}
	info, _ := json.MarshalIndent(struct {
		Digest string   `json:"digest"`
		Lines  []string `json:"lines"`
	}{digest, l.Lines}, "", "  ")
	if err := os.WriteFile(filepath.Join(tree, treeInfoFile), append(info, '\n'), 0o644); err != nil {
		return nil, false, err
	}
	image := filepath.Join(staging, ImageFile)
	if err := makeImage(ctx, ls.format, ls.compression, image, tree, digest); err != nil {
		return nil, false, err
	}
	steps["image"] = step()
	if err := os.RemoveAll(tree); err != nil {
		return nil, false, err
	}
	if l.SHA256, err = hashFile(image); err != nil {
		return nil, false, err
	}
	st, err := os.Stat(image)
	if err != nil {
		return nil, false, err
	}
	l.Bytes, l.BuildMS = st.Size(), float64(time.Since(t0).Microseconds())/1000
	if err := ls.publish(staging, l); err != nil {
		return nil, false, err
	}
	steps["publish"] = step()
	l.Path = filepath.Join(ls.dir, digest, ImageFile)
	return l, true, nil
}

// stepClock returns a function giving the ms since its previous call.
func stepClock(t0 time.Time) func() float64 {
	last := t0
	return func() float64 {
		now := time.Now()
		d := float64(now.Sub(last).Microseconds()) / 1000
		last = now
		return d
	}
}

func (ls *Layers) lockFor(digest string) *sync.Mutex {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	mu, ok := ls.building[digest]
	if !ok {
		mu = &sync.Mutex{}
		ls.building[digest] = mu
	}
	return mu
}

// publish writes the description into staging, syncs and renames it to
// the layer's directory.
func (ls *Layers) publish(staging string, l *Layer) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(staging, infoFile), append(b, '\n')); err != nil {
		return err
	}
	if err := atomicfile.Sync(filepath.Join(staging, ImageFile)); err != nil {
		return err
	}
	if err := os.Rename(staging, filepath.Join(ls.dir, l.Digest)); err != nil {
		return fmt.Errorf("publish layer %s: %w", l.Digest[:12], err)
	}
	return atomicfile.Sync(ls.dir)
}

// installTree installs the lock's wheels into tree.
func (ls *Layers) installTree(ctx context.Context, lock *Lock, tree string) error {
	if err := os.MkdirAll(filepath.Join(tree, SiteDir), 0o755); err != nil {
		return err
	}
	in := newInstaller(tree, ls.limits)
	for _, p := range lock.Pins {
		if err := ctx.Err(); err != nil {
			return err
		}
		path, ok := ls.wheels.Lookup(p.SHA256)
		if !ok {
			return fmt.Errorf("%w: wheel %s %s (sha256 %s) is not in the wheel cache", ErrLayerMissing, p.Name, p.Version, p.SHA256[:12])
		}
		if err := in.install(path); err != nil {
			return err
		}
	}
	return nil
}

// precompile writes bytecode for every module of site/ with the host's
// CPython 3.11 (Resolver.CheckPython made sure it is the guest's): the
// guest's layer is read-only, so without it every boot would compile in
// memory. Unchecked-hash pycs are used without comparing timestamps (a
// layer never changes) and depend on nothing but the source. Isolated
// mode (-I): nothing from the tree can be imported by the compiler. Files
// that do not compile (code for other Pythons, templates) stay without
// bytecode, as pip leaves them.
func precompile(ctx context.Context, python, tree string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	site := filepath.Join(tree, SiteDir)
	// One process: a worker pool (-j) costs more than it saves on a layer.
	cmd := exec.CommandContext(ctx, python, "-I", "-m", "compileall", "-q",
		"--invalidation-mode", "unchecked-hash", "-s", tree, "-p", GuestMount, site)
	cmd.Dir = filepath.Dir(tree)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil // some files did not compile
	}
	if err != nil {
		return fmt.Errorf("precompile the layer: %v: %s", err, truncate(strings.TrimSpace(string(out)), 500))
	}
	return nil
}

// GuestMount is where the guest agent mounts a layer.
const GuestMount = "/deps"

// buildEpoch is every file's time in a layer: builds of one lock give one
// image, byte for byte.
var buildEpoch = time.Unix(0, 0)

// normalizeTree gives every file and directory the same times and
// canonical modes, and counts the files.
func normalizeTree(tree string) (int, error) {
	n := 0
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			mode = 0o755
		case info.Mode()&0o111 != 0:
			mode, n = 0o755, n+1
		default:
			n++
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		return os.Chtimes(p, buildEpoch, buildEpoch)
	})
	return n, err
}

// makeImage builds the read-only image of tree.
func makeImage(ctx context.Context, format Format, compression, image, tree, digest string) error {
	uuid := digest[0:8] + "-" + digest[8:12] + "-" + digest[12:16] + "-" + digest[16:20] + "-" + digest[20:32]
	var cmd *exec.Cmd
	switch format {
	case FormatErofs:
		args := []string{"--quiet", "-T0", "--all-root", "-U" + uuid}
		switch compression { // uncompressed: as fast as ext4 to import, half its size
		case "", "none":
		case "lz4":
			args = append(args, "-zlz4")
		case "lz4hc":
			args = append(args, "-zlz4hc")
		default:
			return fmt.Errorf("erofs compression %q: want none, lz4 or lz4hc", compression)
		}
		cmd = exec.CommandContext(ctx, "mkfs.erofs", append(args, image, tree)...)
	case FormatExt4:
		size, inodes, err := ext4Size(tree)
		if err != nil {
			return err
		}
		cmd = exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "thawdeps", "-U", uuid,
			"-E", "root_owner=0:0,hash_seed="+uuid, "-O", "^has_journal", "-m", "0", "-b", "4096", "-I", "256",
			"-N", strconv.FormatInt(inodes, 10), "-d", tree, image, strconv.FormatInt((size+1<<20-1)>>20, 10)+"M")
		cmd.Env = append(os.Environ(), "E2FSPROGS_FAKE_TIME=1")
	default:
		return fmt.Errorf("layer format %q", format)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build layer image: %s: %v: %s", filepath.Base(cmd.Path), err, truncate(strings.TrimSpace(string(out)), 500))
	}
	return nil
}

// ext4Size sizes an ext4 image for tree: a block per started 4 KiB of
// every file, directory blocks, an inode each, and slack.
func ext4Size(tree string) (bytes, inodes int64, err error) {
	var blocks int64
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		inodes++
		if d.IsDir() {
			n, _ := os.ReadDir(p)
			blocks += 1 + int64(len(n))*64/4096
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		blocks += (info.Size() + 4095) / 4096
		return nil
	})
	inodes += 64
	return blocks*4096*11/10 + inodes*256 + 8<<20, inodes, err
}

func writeSynced(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	return atomicfile.WriteClose(f, b)
}

// Adopt puts a layer built elsewhere in the store (a snapshot pulled from
// the registry brings its layer): src is moved in once its size and
// SHA-256 are want's and want's digest is its lines' in its format. A
// layer of that digest already here must be the same image.
func (ls *Layers) Adopt(src string, want Layer) (*Layer, error) {
	lock, err := ParseLock(want.Lines)
	if err != nil {
		return nil, err
	}
	if _, err := ParseFormat(string(want.Format)); err != nil {
		return nil, invalid(nil, "%v", err)
	}
	if d := lock.Digest(want.Format); d != want.Digest {
		return nil, invalid(nil, "layer %s: its lines digest to %s", want.Digest, d)
	}
	mu := ls.lockFor(want.Digest)
	mu.Lock()
	defer mu.Unlock()
	if have, err := ls.Get(want.Digest); err == nil {
		if have.SHA256 != want.SHA256 {
			return nil, invalid(nil, "layer %s here is another image (sha256 %s) than the one brought (sha256 %s)",
				want.Digest[:12], have.SHA256[:12], want.SHA256[:12])
		}
		_ = os.Remove(src)
		return have, nil
	}
	st, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	sum, err := hashFile(src)
	if err != nil {
		return nil, err
	}
	if sum != want.SHA256 || st.Size() != want.Bytes {
		return nil, invalid(nil, "layer %s: the image brought has sha256 %s and %d bytes, want %s and %d",
			want.Digest[:12], sum[:12], st.Size(), want.SHA256[:12], want.Bytes)
	}
	staging, err := os.MkdirTemp(ls.dir, ".tmp-"+want.Digest[:12]+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	if err := os.Rename(src, filepath.Join(staging, ImageFile)); err != nil {
		return nil, err
	}
	l := want
	l.Path = ""
	if err := ls.publish(staging, &l); err != nil {
		return nil, err
	}
	return ls.Get(want.Digest)
}
