package config

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// defaultMaxVMs is how many VMs of perVMMiB fit in the host's memory.
func defaultMaxVMs(perVMMiB int) int {
	if perVMMiB <= 0 {
		return 16
	}
	return max(1, HostMemoryMiB()/perVMMiB)
}

// HostMemoryMiB is the host's memory (MemTotal), or 16 GiB if unknown:
// the computed defaults are fractions of it.
func HostMemoryMiB() int {
	if mib, ok := meminfoMiB("MemTotal"); ok {
		return mib
	}
	return 16 << 10
}

// HostAvailableMiB is the memory the host can give without swapping
// (MemAvailable).
func HostAvailableMiB() (int, bool) { return meminfoMiB("MemAvailable") }

// meminfoMiB reads one field of /proc/meminfo, in MiB.
func meminfoMiB(field string) (int, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == field+":" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			return int(kib >> 10), err == nil
		}
	}
	return 0, false
}
