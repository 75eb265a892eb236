// Package remotedisk emulates remote block storage (an EBS-like volume) on
// one host: a FUSE file system serves one disk image whose every read and
// write waits a fixed network latency and passes IOPS and bandwidth token
// buckets before it touches the backing file. A loop device over that file
// (with direct I/O, so nothing is cached below it) and a file system on the
// loop device then behave as a disk attached over a network: page cache,
// readahead and O_DIRECT work as on a local disk, only every request costs
// what a remote one does.
package remotedisk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// ImageName is the disk image's name inside the mount.
const ImageName = "disk.img"

// maxRequest is the largest request the kernel sends (FUSE max_pages).
const maxRequest = 1 << 20

// Config is the emulated volume's service model.
type Config struct {
	// Latency is added to every request (the network round trip and the
	// remote server's service time).
	Latency time.Duration
	// IOPS caps requests per second (0: no cap).
	IOPS int
	// BandwidthMBps caps bytes per second, in 10^6 bytes (0: no cap).
	BandwidthMBps int
}

// configJSON is Config on the wire: the latency in microseconds.
type configJSON struct {
	LatencyUS     float64 `json:"latency_us"`
	IOPS          int     `json:"iops_cap"`
	BandwidthMBps int     `json:"bandwidth_mbps_cap"`
}

// MarshalJSON writes the latency in microseconds.
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(configJSON{float64(c.Latency) / float64(time.Microsecond), c.IOPS, c.BandwidthMBps})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Config) UnmarshalJSON(b []byte) error {
	var w configJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*c = Config{Latency: time.Duration(w.LatencyUS * float64(time.Microsecond)), IOPS: w.IOPS, BandwidthMBps: w.BandwidthMBps}
	return nil
}

// Validate reports every bad setting at once.
func (c Config) Validate() error {
	var errs []error
	if c.Latency < 0 || c.Latency > time.Second {
		errs = append(errs, fmt.Errorf("latency %s outside 0..1s", c.Latency))
	}
	if c.IOPS < 0 {
		errs = append(errs, fmt.Errorf("iops cap %d is negative", c.IOPS))
	}
	if c.BandwidthMBps < 0 {
		errs = append(errs, fmt.Errorf("bandwidth cap %d MB/s is negative", c.BandwidthMBps))
	}
	return errors.Join(errs...)
}

// Stats counts the requests served.
type Stats struct {
	Reads      uint64 `json:"reads"`
	ReadBytes  uint64 `json:"read_bytes"`
	Writes     uint64 `json:"writes"`
	WriteBytes uint64 `json:"write_bytes"`
}

// Server is a mounted emulated volume.
type Server struct {
	fuse  *fuse.Server
	image *imageNode
	dir   string
}

// Serve mounts dir with backing (an existing file; its size is the
// volume's) as dir/disk.img under cfg. Close unmounts it.
func Serve(dir, backing string, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(backing, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("backing file: %w", err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		f.Close()
		return nil, fmt.Errorf("backing file %s: want a non-empty regular file", backing)
	}
	img := &imageNode{f: f, size: st.Size(), latency: cfg.Latency}
	if cfg.IOPS > 0 {
		// A burst of a millisecond's worth of requests, at least one.
		img.iops = rate.NewLimiter(rate.Limit(cfg.IOPS), max(1, cfg.IOPS/1000))
	}
	if cfg.BandwidthMBps > 0 {
		img.bw = rate.NewLimiter(rate.Limit(cfg.BandwidthMBps*1_000_000), maxRequest)
	}
	root := &rootNode{image: img}
	sec := time.Second
	srv, err := fs.Mount(dir, root, &fs.Options{
		AttrTimeout: &sec, EntryTimeout: &sec,
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true, // root mounts itself: no fusermount needed
			FsName:            "thaw-remotedisk", Name: "thaw-remotedisk",
			MaxWrite:      maxRequest,
			DisableSplice: true, // replies are copied from our buffer anyway
			// Asynchronous direct I/O lets the loop device keep many
			// requests in flight, as a remote volume's queue does.
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
		},
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	return &Server{fuse: srv, image: img, dir: dir}, nil
}

// Image is the disk image's path.
func (s *Server) Image() string { return filepath.Join(s.dir, ImageName) }

// Stats are the requests served so far.
func (s *Server) Stats() Stats {
	i := s.image
	return Stats{Reads: i.reads.Load(), ReadBytes: i.readBytes.Load(), Writes: i.writes.Load(), WriteBytes: i.writeBytes.Load()}
}

// Close unmounts the file system (it fails while the image is in use, e.g.
// by a loop device) and closes the backing file.
func (s *Server) Close() error {
	if err := s.fuse.Unmount(); err != nil {
		return fmt.Errorf("unmount %s: %w", s.dir, err)
	}
	return s.image.f.Close()
}

type rootNode struct {
	fs.Inode
	image *imageNode
}

var _ fs.NodeOnAdder = (*rootNode)(nil)

func (r *rootNode) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, r.image, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
	r.AddChild(ImageName, ch, false)
}

// imageNode is the disk image: fixed size, every request delayed.
type imageNode struct {
	fs.Inode
	f        *os.File
	size     int64
	latency  time.Duration
	iops, bw *rate.Limiter

	reads, readBytes, writes, writeBytes atomic.Uint64
}

var (
	_ fs.NodeOpener    = (*imageNode)(nil)
	_ fs.NodeGetattrer = (*imageNode)(nil)
	_ fs.NodeSetattrer = (*imageNode)(nil)
	_ fs.NodeReader    = (*imageNode)(nil)
	_ fs.NodeWriter    = (*imageNode)(nil)
	_ fs.NodeFsyncer   = (*imageNode)(nil)
)

// Open serves the image without the page cache (FOPEN_DIRECT_IO): every
// read reaches the emulated volume.
func (n *imageNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (n *imageNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o600
	out.Size = uint64(n.size)
	out.Blksize = 4096
	out.Blocks = uint64((n.size + 511) / 512)
	return 0
}

// Setattr accepts only what leaves the image as it is (the volume has a
// fixed size).
func (n *imageNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != n.size {
		return syscall.EPERM
	}
	return n.Getattr(ctx, f, out)
}

// wait delays one request of size bytes as the volume would: the token
// buckets' delay, then the latency.
func (n *imageNode) wait(ctx context.Context, size int) syscall.Errno {
	now := time.Now()
	var d time.Duration
	for _, l := range []*rate.Limiter{n.iops, n.bw} {
		if l == nil {
			continue
		}
		tokens := 1
		if l == n.bw {
			tokens = min(size, maxRequest)
		}
		r := l.ReserveN(now, tokens)
		if !r.OK() {
			return syscall.EIO
		}
		d = max(d, r.DelayFrom(now))
	}
	// nanosleep, not a Go timer: the runtime's timers wake in whole
	// milliseconds when the process is idle, which would double the latency.
	ts := unix.NsecToTimespec(int64(d + n.latency))
	for {
		err := unix.Nanosleep(&ts, &ts)
		if err == nil {
			return 0
		}
		if err != unix.EINTR || ctx.Err() != nil {
			return syscall.EINTR
		}
	}
}

func (n *imageNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := n.wait(ctx, len(dest)); errno != 0 {
		return nil, errno
	}
	k, err := n.f.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fs.ToErrno(err)
	}
	n.reads.Add(1)
	n.readBytes.Add(uint64(k))
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *imageNode) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if off < 0 || off+int64(len(data)) > n.size {
		return 0, syscall.ENOSPC
	}
	if errno := n.wait(ctx, len(data)); errno != 0 {
		return 0, errno
	}
	k, err := n.f.WriteAt(data, off)
	n.writes.Add(1)
	n.writeBytes.Add(uint64(k))
	if err != nil {
		return uint32(k), fs.ToErrno(err)
	}
	return uint32(k), 0
}

// Fsync flushes the backing file: a flush of the remote volume.
func (n *imageNode) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if errno := n.wait(ctx, 0); errno != 0 {
		return errno
	}
	return fs.ToErrno(n.f.Sync())
}
