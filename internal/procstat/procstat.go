// Package procstat reads a process's page-fault and I/O counters from /proc,
// so an invocation can report what the VMM process did while it ran.
package procstat

import (
	"github.com/thaw-dev/thaw/wire"

	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Counters are a process's page faults, storage reads and RSS (part of
// the API).
type Counters = wire.ProcessCounters

// Since returns c - before for the cumulative counters; RSS is taken from c.
func Since(c, before Counters) Counters {
	d := c
	d.MinorFaults -= before.MinorFaults
	d.MajorFaults -= before.MajorFaults
	d.ReadBytes -= before.ReadBytes
	return d
}

// UserHZ is the unit of /proc/PID/stat's CPU times: the kernel's USER_HZ,
// 100 on x86-64 and arm64.
const UserHZ = 100

// cpuMS is utime+stime (fields 14 and 15 of /proc/PID/stat; f starts at
// field 3) in milliseconds.
func cpuMS(f []string) float64 {
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return float64(u+s) * 1000 / UserHZ
}

// CPUTime returns the CPU time (user+system, every thread) pid has used
// since it started, in milliseconds.
func CPUTime(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	return cpuMS(f), nil
}

// Read returns pid's counters.
func Read(pid int) (Counters, error) {
	var c Counters
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return c, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state(3) ... minflt(10) cminflt(11) majflt(12).
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return c, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 10 {
		return c, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	c.MinorFaults, _ = strconv.ParseUint(f[7], 10, 64)
	c.MajorFaults, _ = strconv.ParseUint(f[9], 10, 64)
	c.CPUTotalMS = cpuMS(f)
	if io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		c.ReadBytes = field(io, "read_bytes:")
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		c.RssAnonKiB = field(st, "RssAnon:")
		c.RssFileKiB = field(st, "RssFile:")
		c.RssShmemKiB = field(st, "RssShmem:")
		c.HugetlbKiB = field(st, "HugetlbPages:")
	}
	return c, nil
}

func field(b []byte, name string) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name); ok {
			v, _ := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	return 0
}

// Memory is a process's memory from smaps_rollup and numa_maps (part of
// the API).
type Memory = wire.ProcessMemory

// ReadMemory returns pid's memory.
func ReadMemory(pid int) (Memory, error) {
	var m Memory
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return m, err
	}
	m.RSSBytes = field(b, "Rss:") << 10
	m.PSSBytes = field(b, "Pss:") << 10
	m.AnonBytes = field(b, "Anonymous:") << 10
	m.SwapBytes = field(b, "Swap:") << 10
	m.PrivateDirty = field(b, "Private_Dirty:") << 10
	m.HugetlbBytes = (field(b, "Private_Hugetlb:") + field(b, "Shared_Hugetlb:")) << 10
	if m.HugetlbBytes > 0 {
		if nm, err := os.ReadFile(fmt.Sprintf("/proc/%d/numa_maps", pid)); err == nil {
			m.HugetlbAnonBytes = hugeAnon(nm)
		}
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		m.FileBytes = field(st, "RssFile:") << 10
		m.ShmemBytes = field(st, "RssShmem:") << 10
	}
	return m, nil
}

// hugeAnon sums the anonymous huge pages of numa_maps lines ("... huge
// anon=N ... kernelpagesize_kB=K"), in bytes.
func hugeAnon(numaMaps []byte) uint64 {
	var total uint64
	for _, line := range strings.Split(string(numaMaps), "\n") {
		f := strings.Fields(line)
		if !slices.Contains(f, "huge") {
			continue
		}
		var anon, kb uint64
		for _, x := range f {
			if v, ok := strings.CutPrefix(x, "anon="); ok {
				anon, _ = strconv.ParseUint(v, 10, 64)
			} else if v, ok := strings.CutPrefix(x, "kernelpagesize_kB="); ok {
				kb, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		total += anon * kb << 10
	}
	return total
}

// Exited reports whether process pid is gone or has exited and awaits its
// parent's wait (state Z or X in /proc/PID/stat): either way it maps no
// memory any more.
func Exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}
