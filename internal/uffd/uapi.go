// Package uffd serves the guest memory of a restored VM through userfaultfd.
//
// The QEMU interposer ("uffd" mode, docs/shim-layout.md) maps guest RAM
// anonymous, registers it for missing-page faults and sends the userfaultfd
// over a Unix socket. The daemon side is:
//
//	l, _ := uffd.Listen(sock)             // before starting QEMU
//	r, _ := l.Accept(ctx)                 // message + fd, validated
//	s, _ := uffd.NewServer(r, memFile, uffd.Options{Record: recordPhase})
//	s.Prefetch(wsFile, wsPages)           // REAP test phase: install the working set
//	r.Ack()                               // QEMU continues, vCPUs start
//	go s.Serve(ctx)                       // every other page on demand
//	...                                   // QEMU exits: Serve returns nil
//	s.RecordedPages()                     // REAP record phase: the working set, in fault order
//	s.Close(); r.Close()
//
// Prefetch follows REAP (ASPLOS'21): the working-set file is read with one
// O_DIRECT read and every page is installed with UFFDIO_COPY before the vCPUs
// run. WriteWorkingSet writes that file from a recorded page list.
//
// The kernel ABI (ioctl numbers, struct layouts) is defined here by hand from
// <linux/userfaultfd.h>; uapi_test.go checks every value against the installed
// header with the C compiler when one is available.
package uffd

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// PageSize is the only page size the shim protocol and the server support.
const PageSize = 4096

// ioctl request numbers, _IOC(dir, type, nr, size) on x86_64:
// dir<<30 | size<<16 | type<<8 | nr, with _IOC_WRITE=1, _IOC_READ=2 and
// type UFFDIO = 0xAA. Note that the kernel defines UFFDIO_WAKE as _IOR even
// though userspace writes the struct (see the header's comment).
const (
	uffdioType = 0xAA

	// _IOWR(0xAA, 0x3F, struct uffdio_api /* 24 bytes */)
	ioctlAPI = 0xc018aa3f
	// _IOWR(0xAA, 0x00, struct uffdio_register /* 32 bytes */)
	ioctlRegister = 0xc020aa00
	// _IOR(0xAA, 0x01, struct uffdio_range /* 16 bytes */)
	ioctlUnregister = 0x8010aa01
	// _IOR(0xAA, 0x02, struct uffdio_range /* 16 bytes */)
	ioctlWake = 0x8010aa02
	// _IOWR(0xAA, 0x03, struct uffdio_copy /* 40 bytes */)
	ioctlCopy = 0xc028aa03
	// _IOWR(0xAA, 0x04, struct uffdio_zeropage /* 32 bytes */)
	ioctlZeropage = 0xc020aa04
)

// UFFD_API is the only API version; UFFDIO_API must be called with it.
const uffdAPI = 0xAA

// UFFDIO_REGISTER modes.
const (
	registerModeMissing = 1 << 0 // UFFDIO_REGISTER_MODE_MISSING
	registerModeWP      = 1 << 1 // UFFDIO_REGISTER_MODE_WP
	registerModeMinor   = 1 << 2 // UFFDIO_REGISTER_MODE_MINOR
)

// Copy and zeropage modes.
const (
	copyModeDontwake     = 1 << 0 // UFFDIO_COPY_MODE_DONTWAKE
	copyModeWP           = 1 << 1 // UFFDIO_COPY_MODE_WP
	zeropageModeDontwake = 1 << 0 // UFFDIO_ZEROPAGE_MODE_DONTWAKE
)

// uffd_msg.event values.
const (
	eventPagefault = 0x12 // UFFD_EVENT_PAGEFAULT
	eventFork      = 0x13 // UFFD_EVENT_FORK
	eventRemap     = 0x14 // UFFD_EVENT_REMAP
	eventRemove    = 0x15 // UFFD_EVENT_REMOVE
	eventUnmap     = 0x16 // UFFD_EVENT_UNMAP
)

// uffd_msg.arg.pagefault.flags.
const (
	pagefaultFlagWrite = 1 << 0 // UFFD_PAGEFAULT_FLAG_WRITE
	pagefaultFlagWP    = 1 << 1 // UFFD_PAGEFAULT_FLAG_WP
	pagefaultFlagMinor = 1 << 2 // UFFD_PAGEFAULT_FLAG_MINOR
)

// Feature bits of uffdio_api.features (only those this package mentions).
const (
	featureEventFork   = 1 << 1 // UFFD_FEATURE_EVENT_FORK
	featureEventRemap  = 1 << 2 // UFFD_FEATURE_EVENT_REMAP
	featureEventRemove = 1 << 3 // UFFD_FEATURE_EVENT_REMOVE
	featureEventUnmap  = 1 << 6 // UFFD_FEATURE_EVENT_UNMAP
	featureThreadID    = 1 << 8 // UFFD_FEATURE_THREAD_ID
)

// Bit numbers of the ioctls bitmask returned by UFFDIO_API / UFFDIO_REGISTER
// (_UFFDIO_* in the header).
const (
	nrRegister   = 0x00
	nrUnregister = 0x01
	nrWake       = 0x02
	nrCopy       = 0x03
	nrZeropage   = 0x04
	nrAPI        = 0x3F
)

// uffd_msg is 32 bytes and packed:
//
//	offset 0  __u8  event
//	offset 1  __u8  reserved1
//	offset 2  __u16 reserved2
//	offset 4  __u32 reserved3
//	offset 8  union arg:
//	            pagefault: __u64 flags (8), __u64 address (16), __u32 ptid (24)
//	            fork:      __u32 ufd (8)
//	            remap:     __u64 from (8), to (16), len (24)
//	            remove:    __u64 start (8), end (16)   (also UNMAP)
const (
	msgSize          = 32
	msgOffEvent      = 0
	msgOffFlags      = 8
	msgOffAddress    = 16
	msgOffForkUFD    = 8
	msgOffRemoveFrom = 8
	msgOffRemoveTo   = 16
)

// uffdioAPI is struct uffdio_api (24 bytes).
type uffdioAPI struct {
	API      uint64
	Features uint64
	Ioctls   uint64
}

// uffdioRange is struct uffdio_range (16 bytes).
type uffdioRange struct {
	Start uint64
	Len   uint64
}

// uffdioRegister is struct uffdio_register (32 bytes).
type uffdioRegister struct {
	Range  uffdioRange
	Mode   uint64
	Ioctls uint64 // written by the kernel
}

// uffdioCopy is struct uffdio_copy (40 bytes). Copy is written by the
// kernel: the number of bytes copied, or a negated errno if none was.
type uffdioCopy struct {
	Dst  uint64
	Src  uint64
	Len  uint64
	Mode uint64
	Copy int64
}

// uffdioZeropage is struct uffdio_zeropage (32 bytes). Zeropage is written
// by the kernel like uffdio_copy.copy.
type uffdioZeropage struct {
	Range    uffdioRange
	Mode     uint64
	Zeropage int64
}

// Compile-time size checks: a wrong layout would make the ioctl number wrong
// too, but these fail at build time rather than at run time.
var (
	_ [24 - unsafe.Sizeof(uffdioAPI{})]struct{}
	_ [unsafe.Sizeof(uffdioAPI{}) - 24]struct{}
	_ [16 - unsafe.Sizeof(uffdioRange{})]struct{}
	_ [unsafe.Sizeof(uffdioRange{}) - 16]struct{}
	_ [32 - unsafe.Sizeof(uffdioRegister{})]struct{}
	_ [unsafe.Sizeof(uffdioRegister{}) - 32]struct{}
	_ [40 - unsafe.Sizeof(uffdioCopy{})]struct{}
	_ [unsafe.Sizeof(uffdioCopy{}) - 40]struct{}
	_ [32 - unsafe.Sizeof(uffdioZeropage{})]struct{}
	_ [unsafe.Sizeof(uffdioZeropage{}) - 32]struct{}
)

func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// uffdCopy issues one UFFDIO_COPY and returns the kernel's copy field
// (bytes copied, or a negated errno) with the ioctl's error.
func uffdCopy(fd int, dst, src, n uint64, mode uint64) (int64, error) {
	c := uffdioCopy{Dst: dst, Src: src, Len: n, Mode: mode}
	err := ioctlPtr(fd, ioctlCopy, unsafe.Pointer(&c))
	return c.Copy, err
}

// uffdZeropage issues one UFFDIO_ZEROPAGE.
func uffdZeropage(fd int, start, n uint64, mode uint64) (int64, error) {
	z := uffdioZeropage{Range: uffdioRange{Start: start, Len: n}, Mode: mode}
	err := ioctlPtr(fd, ioctlZeropage, unsafe.Pointer(&z))
	return z.Zeropage, err
}

// uffdWake issues UFFDIO_WAKE for [start, start+n).
func uffdWake(fd int, start, n uint64) error {
	r := uffdioRange{Start: start, Len: n}
	return ioctlPtr(fd, ioctlWake, unsafe.Pointer(&r))
}
