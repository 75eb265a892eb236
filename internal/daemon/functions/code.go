package functions

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

	"github.com/thaw-dev/thaw/internal/errdefs"
)

// MaxCodeBytes bounds a function's unpacked code.
const MaxCodeBytes = 256 << 20

func skipName(name string) bool { return name == "__pycache__" || name == ".git" }

// extractArchive unpacks a tar.gz whose entries are relative paths inside
// the function directory.
func extractArchive(dst string, r io.Reader) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: archive is not gzip: %w", errdefs.ErrInvalid, err)
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
			return fmt.Errorf("%w: archive: %w", errdefs.ErrInvalid, err)
		}
		name := filepath.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		// Every entry and every directory it implies counts.
		for p := name; p != "." && p != "/" && !seen[p]; p = filepath.Dir(p) {
			seen[p] = true
			if entries++; entries > MaxCodeEntries {
				return fmt.Errorf("%w: archive has more than %d files and directories", errdefs.ErrInvalid, MaxCodeEntries)
			}
		}
		if len(name) > MaxCodePath || strings.Count(name, "/") >= MaxCodeDepth {
			return fmt.Errorf("%w: archive entry %.80q... is longer than %d bytes or nested deeper than %d directories", errdefs.ErrInvalid, name, MaxCodePath, MaxCodeDepth)
		}
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%w: archive entry %q leaves the function directory", errdefs.ErrInvalid, h.Name)
		}
		target := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("%w: archive entry %q: %w", errdefs.ErrInvalid, h.Name, err)
			}
		case tar.TypeReg:
			if total += h.Size; total > MaxCodeBytes {
				return fmt.Errorf("%w: function code exceeds %d MiB", errdefs.ErrInvalid, MaxCodeBytes>>20)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return fmt.Errorf("%w: archive entry %q: %w", errdefs.ErrInvalid, h.Name, err)
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fs.FileMode(h.Mode).Perm()|0o444)
			if err != nil {
				return fmt.Errorf("%w: archive entry %q: %w", errdefs.ErrInvalid, h.Name, err)
			}
			_, err = io.CopyN(out, tr, h.Size)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%w: archive entry %q: %w", errdefs.ErrInvalid, h.Name, err)
			}
		default:
			return fmt.Errorf("%w: archive entry %q is not a regular file or directory", errdefs.ErrInvalid, h.Name)
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
