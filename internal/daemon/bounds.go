package daemon

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultMaxStoredResult is how many result bytes an invocation's history
// keeps by default.
const DefaultMaxStoredResult = 64 << 10

// maxStoredText bounds an error message or traceback kept in the history.
const maxStoredText = 16 << 10

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

// forHistory is the copy of inv the invocation history keeps: a result
// over limit bytes becomes its first bytes (as text) and the note that it
// was cut, and long error texts are cut, so listing invocations stays
// bounded whatever handlers return.
func forHistory(inv *Invocation, limit int) *Invocation {
	c := *inv
	c.Logs = nil // kept apart (logs.go)
	if len(c.Result) > limit {
		c.ResultBytes = len(c.Result)
		c.ResultTruncated = true
		c.ResultPrefix = truncUTF8(string(c.Result[:min(len(c.Result), limit+utf8.UTFMax)]), limit) // never a copy of the whole
		c.Result = nil
	}
	if e := c.Error; e != nil && (len(e.Message) > maxStoredText || len(e.Traceback) > maxStoredText) {
		ec := *e
		ec.Message, ec.Traceback = truncUTF8(ec.Message, maxStoredText), truncUTF8(ec.Traceback, maxStoredText)
		c.Error = &ec
		c.ErrorTruncated = true
	}
	return &c
}

func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// historyDetail encodes the history's copy of inv.
func (s *Service) historyDetail(inv *Invocation) []byte {
	b, _ := json.Marshal(forHistory(inv, s.cfg.MaxStoredResultBytes))
	return b
}
