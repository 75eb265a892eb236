// Package cgroup puts each VM's VMM process in a control group of its own,
// with a memory limit, a CPU weight and a task limit, on cgroup v2 (the
// unified hierarchy of modern hosts) or v1 (separate memory, cpu and pids
// hierarchies). Groups live under a parent of the daemon's own, below the
// cgroup the daemon runs in, so a limit placed on the daemon's service also
// bounds its VMs.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/vmend"
)

// Version is the cgroup interface in use.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

// Limits bound one group.
type Limits struct {
	MemoryBytes int64 // hard limit on memory (RAM the group is charged for); 0: none
	CPUWeight   int   // relative CPU share, 1-10000 (v2 scale, 100 is the default); 0: default
	Tasks       int   // processes and threads; 0: none
}

// Manager creates groups under one parent.
type Manager struct {
	version Version
	// dirs maps a controller ("memory", "cpu", "pids") to the parent's
	// directory in its hierarchy; on v2 every controller maps to the same.
	dirs map[string]string
}

// v1Controllers are the v1 hierarchies thaw uses.
var v1Controllers = []string{"memory", "cpu", "pids"}

// Open prepares the parent group name (e.g. "thaw-1a2b3c4d") below the
// daemon's own cgroup, on the cgroup file system mounted at root
// (normally /sys/fs/cgroup). It removes groups a previous daemon left.
func Open(root, name string) (*Manager, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup parent name %q is not a single path element", name)
	}
	own, err := ownCgroups("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	return openAt(root, own, name)
}

// openAt is Open for a process in the cgroups own.
func openAt(root string, own map[string]string, name string) (*Manager, error) {
	m := &Manager{dirs: map[string]string{}}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		m.version = V2
		if err := m.openV2(root, own[""], name); err != nil {
			return nil, err
		}
	} else {
		m.version = V1
		for _, c := range v1Controllers {
			mount := filepath.Join(root, c)
			if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
				return nil, fmt.Errorf("cgroup v1: no %s hierarchy at %s", c, mount)
			}
			dir := filepath.Join(mount, own[c], name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("cgroup v1 %s: %w", c, err)
			}
			m.dirs[c] = dir
		}
	}
	m.sweep()
	return m, nil
}

// openV2 creates the parent below the daemon's cgroup and enables the
// controllers for its children. A cgroup with processes cannot delegate
// controllers ("no internal processes"), so a daemon in a delegated
// subtree (systemd Delegate=yes) first moves itself into a leaf.
func (m *Manager) openV2(root, own, name string) error {
	base := filepath.Join(root, own)
	dir := filepath.Join(base, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	need := []string{"memory", "cpu", "pids"}
	if err := enable(base, need); err != nil && own != "/" && own != "" {
		if !errors.Is(err, syscall.EBUSY) {
			return err
		}
		leaf := filepath.Join(base, "thawd")
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return fmt.Errorf("cgroup v2: %w", err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0o644); err != nil {
			return fmt.Errorf("cgroup v2: move thawd into %s: %w", leaf, err)
		}
		if err := enable(base, need); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := enable(dir, need); err != nil {
		return err
	}
	for _, c := range need {
		m.dirs[c] = dir
	}
	return nil
}

// enable turns controllers on for dir's children.
func enable(dir string, controllers []string) error {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	have := strings.Fields(string(avail))
	var add []string
	for _, c := range controllers {
		found := false
		for _, h := range have {
			found = found || h == c
		}
		if !found {
			return fmt.Errorf("cgroup v2: controller %s is not available in %s", c, dir)
		}
		add = append(add, "+"+c)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0o644); err != nil {
		return fmt.Errorf("cgroup v2: enable %s in %s: %w", strings.Join(controllers, ","), dir, err)
	}
	return nil
}

// ownCgroups parses /proc/self/cgroup: controller (or "" for v2) to path.
func ownCgroups(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// Version says which interface the manager drives.
func (m *Manager) Version() Version { return m.version }

// Parent is the parent group's directory (of the memory controller on v1).
func (m *Manager) Parent() string { return m.dirs["memory"] }

// sweep removes empty groups a previous daemon left (their processes were
// killed by reconcile); groups that still hold processes stay.
func (m *Manager) sweep() {
	seen := map[string]bool{}
	for _, dir := range m.dirs {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				_ = syscall.Rmdir(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// Group is one VM's cgroup.
type Group struct {
	m    *Manager
	name string
	fd   int // v2: the group's directory, for CLONE_INTO_CGROUP; -1 on v1
}

// New creates the group name with lim.
func (m *Manager) New(name string, lim Limits) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup name %q is not a single path element", name)
	}
	g := &Group{m: m, name: name, fd: -1}
	for _, dir := range g.dirs() {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			g.Remove()
			return nil, fmt.Errorf("cgroup %s: %w", name, err)
		}
	}
	if err := g.apply(lim); err != nil {
		g.Remove()
		return nil, err
	}
	if m.version == V2 {
		fd, err := syscall.Open(g.dir("memory"), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			g.Remove()
			return nil, fmt.Errorf("cgroup %s: %w", name, err)
		}
		g.fd = fd
	}
	return g, nil
}

func (g *Group) dir(controller string) string {
	return filepath.Join(g.m.dirs[controller], g.name)
}

// dirs lists the group's directories, once each.
func (g *Group) dirs() []string {
	if g.m.version == V2 {
		return []string{g.dir("memory")}
	}
	out := make([]string, 0, len(v1Controllers))
	for _, c := range v1Controllers {
		out = append(out, g.dir(c))
	}
	return out
}

func (g *Group) apply(lim Limits) error {
	type setting struct{ controller, file, value string }
	var set []setting
	weight := lim.CPUWeight
	if weight == 0 {
		weight = 100
	}
	if weight < 1 || weight > 10000 {
		return fmt.Errorf("cpu weight %d is outside 1-10000", weight)
	}
	if g.m.version == V2 {
		set = append(set, setting{"cpu", "cpu.weight", strconv.Itoa(weight)})
		if lim.MemoryBytes > 0 {
			set = append(set, setting{"memory", "memory.max", strconv.FormatInt(lim.MemoryBytes, 10)},
				setting{"memory", "memory.swap.max", "0"})
		}
		if lim.Tasks > 0 {
			set = append(set, setting{"pids", "pids.max", strconv.Itoa(lim.Tasks)})
		}
	} else {
		// v1 shares: 1024 is the default, like v2's weight 100.
		set = append(set, setting{"cpu", "cpu.shares", strconv.Itoa(max(2, weight*1024/100))})
		if lim.MemoryBytes > 0 {
			set = append(set, setting{"memory", "memory.limit_in_bytes", strconv.FormatInt(lim.MemoryBytes, 10)})
			if _, err := os.Stat(filepath.Join(g.dir("memory"), "memory.memsw.limit_in_bytes")); err == nil {
				// Memory and swap together: swapping does not escape the limit.
				set = append(set, setting{"memory", "memory.memsw.limit_in_bytes", strconv.FormatInt(lim.MemoryBytes, 10)})
			}
		}
		if lim.Tasks > 0 {
			set = append(set, setting{"pids", "pids.max", strconv.Itoa(lim.Tasks)})
		}
	}
	for _, s := range set {
		p := filepath.Join(g.dir(s.controller), s.file)
		if err := os.WriteFile(p, []byte(s.value), 0o644); err != nil {
			if s.file == "memory.swap.max" && errors.Is(err, os.ErrNotExist) {
				continue // no swap accounting on this kernel
			}
			return fmt.Errorf("cgroup %s: set %s=%s: %w", g.name, s.file, s.value, err)
		}
	}
	return nil
}

// FD is the v2 group directory for clone(CLONE_INTO_CGROUP), so the process
// is in its group from its first instruction; -1 on v1.
func (g *Group) FD() int { return g.fd }

// Add moves a started process (and its threads) into the group: v1 has no
// clone-into, so there is a short window before this runs.
func (g *Group) Add(pid int) error {
	for _, dir := range g.dirs() {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: add pid %d: %w", g.name, pid, err)
		}
	}
	return nil
}

// OOMKills reports how many processes the memory limit killed.
func (g *Group) OOMKills() int {
	c, _ := g.MemoryCounters()
	return c.OOMKills
}

// MemoryCounters reads the group's memory limit and how many processes it
// killed (v1 memory.oom_control, v2 memory.events oom_kill). The counts of
// charges refused at the limit (memory.failcnt) are left out: they count
// every retry of reclaim, millions for one kill.
func (g *Group) MemoryCounters() (vmend.MemoryCounters, error) {
	var c vmend.MemoryCounters
	dir := g.dir("memory")
	read := func(file string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return "", fmt.Errorf("cgroup %s: %w", g.name, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	events, limit := "memory.oom_control", "memory.limit_in_bytes"
	if g.m.version == V2 {
		events, limit = "memory.events", "memory.max"
	}
	ev, err := read(events)
	if err != nil {
		return c, err
	}
	for _, line := range strings.Split(ev, "\n") {
		if k, v, _ := strings.Cut(line, " "); k == "oom_kill" {
			c.OOMKills, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if v, err := read(limit); err == nil {
		c.LimitBytes, _ = strconv.ParseInt(v, 10, 64) // v2 "max": 0, unknown
	}
	return c, nil
}

// Remove deletes the group once its processes are gone (the kernel frees
// an exiting process's cgroup reference a little after it is reaped).
func (g *Group) Remove() error {
	if g.fd >= 0 {
		syscall.Close(g.fd)
		g.fd = -1
	}
	var errs []error
	for _, dir := range g.dirs() {
		var err error
		for i := 0; i < 100; i++ {
			if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}
