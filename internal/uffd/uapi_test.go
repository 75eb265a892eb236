package uffd

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// goABI lists every hand-written constant, struct size and field offset
// under the name the C program below prints it with.
var goABI = map[string]uint64{
	"UFFDIO_API":                         ioctlAPI,
	"UFFDIO_REGISTER":                    ioctlRegister,
	"UFFDIO_UNREGISTER":                  ioctlUnregister,
	"UFFDIO_WAKE":                        ioctlWake,
	"UFFDIO_COPY":                        ioctlCopy,
	"UFFDIO_ZEROPAGE":                    ioctlZeropage,
	"UFFDIO":                             uffdioType,
	"UFFD_API":                           uffdAPI,
	"UFFDIO_REGISTER_MODE_MISSING":       registerModeMissing,
	"UFFDIO_REGISTER_MODE_WP":            registerModeWP,
	"UFFDIO_REGISTER_MODE_MINOR":         registerModeMinor,
	"UFFDIO_COPY_MODE_DONTWAKE":          copyModeDontwake,
	"UFFDIO_COPY_MODE_WP":                copyModeWP,
	"UFFDIO_ZEROPAGE_MODE_DONTWAKE":      zeropageModeDontwake,
	"UFFD_EVENT_PAGEFAULT":               eventPagefault,
	"UFFD_EVENT_FORK":                    eventFork,
	"UFFD_EVENT_REMAP":                   eventRemap,
	"UFFD_EVENT_REMOVE":                  eventRemove,
	"UFFD_EVENT_UNMAP":                   eventUnmap,
	"UFFD_PAGEFAULT_FLAG_WRITE":          pagefaultFlagWrite,
	"UFFD_PAGEFAULT_FLAG_WP":             pagefaultFlagWP,
	"UFFD_PAGEFAULT_FLAG_MINOR":          pagefaultFlagMinor,
	"UFFD_FEATURE_EVENT_FORK":            featureEventFork,
	"UFFD_FEATURE_EVENT_REMAP":           featureEventRemap,
	"UFFD_FEATURE_EVENT_REMOVE":          featureEventRemove,
	"UFFD_FEATURE_EVENT_UNMAP":           featureEventUnmap,
	"UFFD_FEATURE_THREAD_ID":             featureThreadID,
	"_UFFDIO_REGISTER":                   nrRegister,
	"_UFFDIO_UNREGISTER":                 nrUnregister,
	"_UFFDIO_WAKE":                       nrWake,
	"_UFFDIO_COPY":                       nrCopy,
	"_UFFDIO_ZEROPAGE":                   nrZeropage,
	"_UFFDIO_API":                        nrAPI,
	"sizeof(struct uffd_msg)":            msgSize,
	"offsetof(uffd_msg.event)":           msgOffEvent,
	"offsetof(uffd_msg.pf.flags)":        msgOffFlags,
	"offsetof(uffd_msg.pf.address)":      msgOffAddress,
	"offsetof(uffd_msg.fork.ufd)":        msgOffForkUFD,
	"offsetof(uffd_msg.remove.start)":    msgOffRemoveFrom,
	"offsetof(uffd_msg.remove.end)":      msgOffRemoveTo,
	"sizeof(struct uffdio_api)":          uint64(unsafe.Sizeof(uffdioAPI{})),
	"sizeof(struct uffdio_range)":        uint64(unsafe.Sizeof(uffdioRange{})),
	"sizeof(struct uffdio_register)":     uint64(unsafe.Sizeof(uffdioRegister{})),
	"sizeof(struct uffdio_copy)":         uint64(unsafe.Sizeof(uffdioCopy{})),
	"sizeof(struct uffdio_zeropage)":     uint64(unsafe.Sizeof(uffdioZeropage{})),
	"offsetof(uffdio_api.features)":      uint64(unsafe.Offsetof(uffdioAPI{}.Features)),
	"offsetof(uffdio_api.ioctls)":        uint64(unsafe.Offsetof(uffdioAPI{}.Ioctls)),
	"offsetof(uffdio_register.mode)":     uint64(unsafe.Offsetof(uffdioRegister{}.Mode)),
	"offsetof(uffdio_register.ioctls)":   uint64(unsafe.Offsetof(uffdioRegister{}.Ioctls)),
	"offsetof(uffdio_copy.dst)":          uint64(unsafe.Offsetof(uffdioCopy{}.Dst)),
	"offsetof(uffdio_copy.src)":          uint64(unsafe.Offsetof(uffdioCopy{}.Src)),
	"offsetof(uffdio_copy.len)":          uint64(unsafe.Offsetof(uffdioCopy{}.Len)),
	"offsetof(uffdio_copy.mode)":         uint64(unsafe.Offsetof(uffdioCopy{}.Mode)),
	"offsetof(uffdio_copy.copy)":         uint64(unsafe.Offsetof(uffdioCopy{}.Copy)),
	"offsetof(uffdio_zeropage.mode)":     uint64(unsafe.Offsetof(uffdioZeropage{}.Mode)),
	"offsetof(uffdio_zeropage.zeropage)": uint64(unsafe.Offsetof(uffdioZeropage{}.Zeropage)),
}

const abiProgram = `#include <stdio.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <linux/userfaultfd.h>

#define V(name) printf("%s %llu\n", #name, (unsigned long long)(name))
#define P(label, expr) printf("%s %llu\n", label, (unsigned long long)(expr))

int main(void) {
	V(UFFDIO_API); V(UFFDIO_REGISTER); V(UFFDIO_UNREGISTER); V(UFFDIO_WAKE);
	V(UFFDIO_COPY); V(UFFDIO_ZEROPAGE); V(UFFDIO); V(UFFD_API);
	V(UFFDIO_REGISTER_MODE_MISSING); V(UFFDIO_REGISTER_MODE_WP); V(UFFDIO_REGISTER_MODE_MINOR);
	V(UFFDIO_COPY_MODE_DONTWAKE); V(UFFDIO_COPY_MODE_WP); V(UFFDIO_ZEROPAGE_MODE_DONTWAKE);
	V(UFFD_EVENT_PAGEFAULT); V(UFFD_EVENT_FORK); V(UFFD_EVENT_REMAP); V(UFFD_EVENT_REMOVE); V(UFFD_EVENT_UNMAP);
	V(UFFD_PAGEFAULT_FLAG_WRITE); V(UFFD_PAGEFAULT_FLAG_WP); V(UFFD_PAGEFAULT_FLAG_MINOR);
	V(UFFD_FEATURE_EVENT_FORK); V(UFFD_FEATURE_EVENT_REMAP); V(UFFD_FEATURE_EVENT_REMOVE);
	V(UFFD_FEATURE_EVENT_UNMAP); V(UFFD_FEATURE_THREAD_ID);
	V(_UFFDIO_REGISTER); V(_UFFDIO_UNREGISTER); V(_UFFDIO_WAKE); V(_UFFDIO_COPY);
	V(_UFFDIO_ZEROPAGE); V(_UFFDIO_API);
	P("sizeof(struct uffd_msg)", sizeof(struct uffd_msg));
	P("offsetof(uffd_msg.event)", offsetof(struct uffd_msg, event));
	P("offsetof(uffd_msg.pf.flags)", offsetof(struct uffd_msg, arg.pagefault.flags));
	P("offsetof(uffd_msg.pf.address)", offsetof(struct uffd_msg, arg.pagefault.address));
	P("offsetof(uffd_msg.fork.ufd)", offsetof(struct uffd_msg, arg.fork.ufd));
	P("offsetof(uffd_msg.remove.start)", offsetof(struct uffd_msg, arg.remove.start));
	P("offsetof(uffd_msg.remove.end)", offsetof(struct uffd_msg, arg.remove.end));
	P("sizeof(struct uffdio_api)", sizeof(struct uffdio_api));
	P("sizeof(struct uffdio_range)", sizeof(struct uffdio_range));
	P("sizeof(struct uffdio_register)", sizeof(struct uffdio_register));
	P("sizeof(struct uffdio_copy)", sizeof(struct uffdio_copy));
	P("sizeof(struct uffdio_zeropage)", sizeof(struct uffdio_zeropage));
	P("offsetof(uffdio_api.features)", offsetof(struct uffdio_api, features));
	P("offsetof(uffdio_api.ioctls)", offsetof(struct uffdio_api, ioctls));
	P("offsetof(uffdio_register.mode)", offsetof(struct uffdio_register, mode));
	P("offsetof(uffdio_register.ioctls)", offsetof(struct uffdio_register, ioctls));
	P("offsetof(uffdio_copy.dst)", offsetof(struct uffdio_copy, dst));
	P("offsetof(uffdio_copy.src)", offsetof(struct uffdio_copy, src));
	P("offsetof(uffdio_copy.len)", offsetof(struct uffdio_copy, len));
	P("offsetof(uffdio_copy.mode)", offsetof(struct uffdio_copy, mode));
	P("offsetof(uffdio_copy.copy)", offsetof(struct uffdio_copy, copy));
	P("offsetof(uffdio_zeropage.mode)", offsetof(struct uffdio_zeropage, mode));
	P("offsetof(uffdio_zeropage.zeropage)", offsetof(struct uffdio_zeropage, zeropage));
	return 0;
}
`

// TestABIMatchesHeader compiles a C program against <linux/userfaultfd.h>
// (package linux-libc-dev) and compares everything it prints with the Go
// definitions. Skipped when there is no C compiler or header.
func TestABIMatchesHeader(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s): %v", cc, err)
	}
	if _, err := os.Stat("/usr/include/linux/userfaultfd.h"); err != nil {
		t.Skipf("no kernel headers: %v (apt-get install linux-libc-dev)", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "abi.c")
	bin := filepath.Join(dir, "abi")
	if err := os.WriteFile(src, []byte(abiProgram), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		name, val := line[:i], line[i+1:]
		c, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		g, ok := goABI[name]
		if !ok {
			t.Errorf("C prints %s which the Go table lacks", name)
			continue
		}
		seen[name] = true
		if g != c {
			t.Errorf("%s: Go %#x, C header %#x", name, g, c)
		}
	}
	for name := range goABI {
		if !seen[name] {
			t.Errorf("%s not checked against the header", name)
		}
	}
}

// TestIoctlNumbers recomputes the request numbers from _IOC and the struct
// sizes, so they are checked even without a C compiler.
func TestIoctlNumbers(t *testing.T) {
	const w, r = 1, 2 // _IOC_WRITE, _IOC_READ
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"UFFDIO_API", ioctlAPI, ioc(r|w, uffdioType, nrAPI, unsafe.Sizeof(uffdioAPI{}))},
		{"UFFDIO_REGISTER", ioctlRegister, ioc(r|w, uffdioType, nrRegister, unsafe.Sizeof(uffdioRegister{}))},
		{"UFFDIO_UNREGISTER", ioctlUnregister, ioc(r, uffdioType, nrUnregister, unsafe.Sizeof(uffdioRange{}))},
		{"UFFDIO_WAKE", ioctlWake, ioc(r, uffdioType, nrWake, unsafe.Sizeof(uffdioRange{}))},
		{"UFFDIO_COPY", ioctlCopy, ioc(r|w, uffdioType, nrCopy, unsafe.Sizeof(uffdioCopy{}))},
		{"UFFDIO_ZEROPAGE", ioctlZeropage, ioc(r|w, uffdioType, nrZeropage, unsafe.Sizeof(uffdioZeropage{}))},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, _IOC gives %#x", c.name, c.got, c.want)
		}
	}
	// The values the brief lists.
	for name, v := range map[string]uintptr{
		"UFFDIO_API": 0xc018aa3f, "UFFDIO_REGISTER": 0xc020aa00, "UFFDIO_COPY": 0xc028aa03,
		"UFFDIO_ZEROPAGE": 0xc020aa04, "UFFDIO_WAKE": 0x8010aa02,
	} {
		if uintptr(goABI[name]) != v {
			t.Errorf("%s = %#x, want %#x", name, goABI[name], v)
		}
	}
}

// TestKernelFeatures logs what the running kernel offers (UFFDIO_API with
// no features requested answers with every supported one).
func TestKernelFeatures(t *testing.T) {
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if e != 0 {
		t.Skipf("userfaultfd: %v", e)
	}
	defer unix.Close(int(fd))
	a, err := apiHandshake(int(fd), 0)
	if err != nil {
		t.Fatalf("UFFDIO_API: %v", err)
	}
	t.Logf("UFFDIO_API: api %#x features %#x ioctls %#x", a.API, a.Features, a.Ioctls)
	for _, nr := range []uint{nrRegister, nrUnregister, nrAPI} {
		if a.Ioctls&(1<<nr) == 0 {
			t.Errorf("ioctls %#x lack bit %d", a.Ioctls, nr)
		}
	}
	if _, err := apiHandshake(int(fd), 0); err == nil {
		t.Errorf("second UFFDIO_API succeeded")
	}
}
