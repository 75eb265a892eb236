// Package guestimage reads the guest artifacts built by guest/build-image.sh:
// a directory named by the content hash of its inputs, holding the kernel,
// the initramfs, the shared read-only root filesystem and image.json, which
// describes and checksums them.
package guestimage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// File is one artifact's description in image.json.
type File struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Image is a built guest image.
type Image struct {
	Dir           string          `json:"dir"`
	Format        int             `json:"format"`
	Hash          string          `json:"hash"`
	KernelVersion string          `json:"kernel_version"`
	Cmdline       string          `json:"cmdline"`
	Files         map[string]File `json:"files"`
	BuiltAt       string          `json:"built_at"`
}

// Artifact names in an image directory.
const (
	Kernel = "vmlinuz"
	// KernelUncompressed is the same kernel as an ELF with a PVH entry point.
	// QEMU boots it directly: under TCG this saves the ~4.5 s the guest
	// spends decompressing Debian's xz-compressed bzImage.
	KernelUncompressed = "vmlinux"
	Initrd             = "initrd.img"
	Rootfs             = "rootfs.ext4"
)

// Path returns the path of an artifact.
func (im *Image) Path(name string) string { return filepath.Join(im.Dir, name) }

// KernelFile names the kernel to boot: the uncompressed one when the image
// has it.
func (im *Image) KernelFile() string {
	if _, ok := im.Files[KernelUncompressed]; ok {
		return KernelUncompressed
	}
	return Kernel
}

// Load reads dir/image.json and checks that every artifact is present with
// the size it lists. Contents were hashed at build time; the digests are
// what snapshots record as their inputs.
func Load(dir string) (*Image, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("guest image %s: %w (build it with 'make image')", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(resolved, "image.json"))
	if err != nil {
		return nil, fmt.Errorf("guest image %s: %w (build it with 'make image')", dir, err)
	}
	var im Image
	if err := json.Unmarshal(b, &im); err != nil {
		return nil, fmt.Errorf("guest image %s: image.json: %w", dir, err)
	}
	im.Dir = resolved
	var errs []error
	for _, name := range []string{im.KernelFile(), Initrd, Rootfs} {
		f, ok := im.Files[name]
		if !ok || len(f.SHA256) != 64 {
			errs = append(errs, fmt.Errorf("image.json lists no valid %s", name))
			continue
		}
		st, err := os.Stat(im.Path(name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Size() != f.Size {
			errs = append(errs, fmt.Errorf("%s is %d bytes, image.json says %d", name, st.Size(), f.Size))
		}
	}
	if im.Cmdline == "" {
		errs = append(errs, errors.New("image.json has no cmdline"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("guest image %s: %w", resolved, err)
	}
	return &im, nil
}
