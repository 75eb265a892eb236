package daemon

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/thaw-dev/thaw/internal/daemon/history"
)

// DefaultMaxStoredResult is how many result bytes an invocation's history
// keeps by default (package history).
const DefaultMaxStoredResult = history.DefaultMaxStoredResult

// defaultMaxVMs is how many VMs of perVMMiB fit in the host's memory.
func defaultMaxVMs(perVMMiB int) int {
	if perVMMiB <= 0 {
		return 16
	}
	return max(1, hostMemoryMiB()/perVMMiB)
}

// hostMemoryMiB is the host's memory (MemTotal), or 16 GiB if unknown.
func hostMemoryMiB() int {
	if mib, ok := meminfoMiB("MemTotal"); ok {
		return mib
	}
	return 16 << 10
}

// hostAvailableMiB is the memory the host can give without swapping
// (MemAvailable).
func hostAvailableMiB() (int, bool) { return meminfoMiB("MemAvailable") }

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
