package vmend

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// guest is what the end of a guest console says about the guest's end.
type guest struct {
	panic, panicLine  string // the kernel's panic message and its line
	fatal, fatalLine  string // a thaw FATAL reason and its line
	fatalBy           string // "agent" or "initramfs"
	oomKill           string // the last OOM killer line ("Out of memory: Killed process ...")
	noKillable        bool   // "Out of memory and no killable processes"
	powerOff, restart bool   // the kernel's last words: power down, restart
	last              string // the last line
}

var (
	// A kernel log line's timestamp, "[   23.133225] ".
	stampRE    = regexp.MustCompile(`^\[\s*\d+\.\d+\]\s?`)
	panicRE    = regexp.MustCompile(`Kernel panic - not syncing: (.*?)(?:\s*\]---)?$`)
	fatalRE    = regexp.MustCompile(`^thaw-(agent|initramfs): FATAL: (.*?)(?:; powering off)?$`)
	oomKillRE  = regexp.MustCompile(`Out of memory(?: \([^)]*\))?: Killed process \d+ \([^)]*\)|Memory cgroup out of memory: Killed process \d+ \([^)]*\)`)
	noKillable = "Out of memory and no killable processes"
)

// readConsole scans a console's end for the lines that explain a guest's end.
func readConsole(console string) guest {
	var g guest
	for _, raw := range strings.Split(strings.ToValidUTF8(console, "?"), "\n") {
		line := stampRE.ReplaceAllString(strings.TrimSpace(strings.TrimRight(raw, "\r")), "")
		line = printable(line)
		if line == "" {
			continue
		}
		g.last = line
		if m := panicRE.FindStringSubmatch(line); m != nil {
			if g.panic == "" { // the first: the end-of-panic trailer repeats it
				g.panic, g.panicLine = m[1], line
			}
			continue
		}
		if m := fatalRE.FindStringSubmatch(line); m != nil {
			g.fatalBy, g.fatal, g.fatalLine = m[1], m[2], line
			continue
		}
		if m := oomKillRE.FindString(line); m != "" {
			g.oomKill = line
		}
		switch {
		case strings.Contains(line, noKillable):
			g.noKillable = true
		case strings.Contains(line, "reboot: Power down"):
			g.powerOff = true
		case strings.Contains(line, "reboot: Restarting system"):
			g.restart = true
		}
	}
	for _, s := range []*string{&g.panicLine, &g.fatalLine, &g.oomKill, &g.last, &g.panic, &g.fatal} {
		*s = clip(*s, 300)
	}
	return g
}

// printable drops control characters, C0 and C1 (a console carries escape
// sequences), and invalid UTF-8.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r >= 0x7f && r < 0xa0 || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
}

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// lastBytes is the end of s, at most n bytes.
func lastBytes(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return strings.ToValidUTF8(s, "")
}

// oneLine joins s's words with single spaces.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f && r < 0xa0 }), " ")
}

// lastLine is s's last non-empty line, printable.
func lastLine(s string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(printable(lines[i])); l != "" {
			return l
		}
	}
	return ""
}
