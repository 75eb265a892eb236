package e2e

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hostSnapshot is what a daemon may change on its host.
type hostSnapshot struct {
	cgroups []string // the daemon's cgroups (named for its data directory) in every hierarchy, and all below the test's own
	shm     []string // every path below /dev/shm
	links   []string // network links
	tables  []string // nftables tables
	forward string   // net.ipv4.ip_forward
}

// state reads the namespace's host state; cgs are the test's cgroups the
// daemon runs in, dataDir its data directory.
func (h *hostNS) state(t *testing.T, cgs []string, dataDir string) hostSnapshot {
	t.Helper()
	s := hostSnapshot{cgroups: thawCgroups(t, cgs, cgroupName(dataDir))}
	s.shm = lines(h.sh(t, "find /dev/shm -mindepth 1"))
	for _, l := range lines(h.sh(t, "ip -o link show")) {
		if f := strings.Fields(l); len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			s.links = append(s.links, name)
		}
	}
	s.tables = lines(h.sh(t, "nft list tables"))
	s.forward = strings.TrimSpace(h.sh(t, "cat /proc/sys/net/ipv4/ip_forward"))
	slices.Sort(s.shm)
	slices.Sort(s.links)
	slices.Sort(s.tables)
	return s
}

// compare fails t for every difference between before and after.
func (h *hostNS) compare(t *testing.T, when string, before, after hostSnapshot) {
	t.Helper()
	diff := func(what string, b, a []string) {
		var added, gone []string
		for _, x := range a {
			if !slices.Contains(b, x) {
				added = append(added, x)
			}
		}
		for _, x := range b {
			if !slices.Contains(a, x) {
				gone = append(gone, x)
			}
		}
		if len(added)+len(gone) > 0 {
			t.Errorf("%s: %s changed: left behind %v, gone %v", when, what, added, gone)
		}
	}
	diff("cgroups", before.cgroups, after.cgroups)
	diff("/dev/shm", before.shm, after.shm)
	diff("network links", before.links, after.links)
	diff("nftables tables", before.tables, after.tables)
	if before.forward != after.forward {
		t.Errorf("%s: net.ipv4.ip_forward is %s, was %s", when, after.forward, before.forward)
	}
}

// thawCgroups walks every cgroup hierarchy of the host and lists the
// groups named parent (and all below them) and every group below the
// directories own.
func thawCgroups(t *testing.T, own []string, parent string) []string {
	t.Helper()
	var out []string
	for _, root := range cgroupMounts(t) {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) || p != root {
					return nil // groups come and go while the walk runs
				}
				return err
			}
			if !d.IsDir() || p == root {
				return nil
			}
			mine := strings.Contains(p+"/", "/"+parent+"/")
			for _, o := range own {
				mine = mine || strings.HasPrefix(p, o+"/")
			}
			if mine {
				out = append(out, p)
			}
			return nil
		})
	}
	slices.Sort(out)
	return out
}

// cgroupMounts lists the mount points of every cgroup (v1) and cgroup2
// file system.
func cgroupMounts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range lines(string(b)) {
		_, post, ok := strings.Cut(l, " - ")
		f, pre := strings.Fields(post), strings.Fields(l)
		if ok && len(f) > 0 && (f[0] == "cgroup" || f[0] == "cgroup2") && len(pre) > 4 {
			out = append(out, pre[4])
		}
	}
	if len(out) == 0 {
		t.Fatal("no cgroup file system mounted")
	}
	return out
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
