// Package hoststate shares host-wide changes among the thawd processes of
// one host (each with its own data directory), so that the last daemon to
// need a change undoes it and a change a crashed daemon left is undone by
// the next daemon that looks.
//
// A directory (DefaultDir) holds, per change, what the host had before the
// first daemon changed it ("saved") and one record per daemon holding the
// change: its pid, its start time and the boot it started in, so a dead
// daemon, or a recycled pid, is told from a live one. Every look and
// change happens under an exclusive lock on the directory's lock file.
package hoststate

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/atomicfile"
)

// DefaultDir is where thawd keeps the host state it shares: in /run, so a
// reboot, which undoes every change, clears the records too; not in
// /run/thaw, which a service manager may remove when one daemon's unit
// stops (systemd's RuntimeDirectory) while others still hold a change.
const DefaultDir = "/run/thaw-hoststate"

// Errors.
var (
	// ErrNotPrivate: the directory could be written by someone other than
	// the daemon's user.
	ErrNotPrivate = errors.New("host state directory is not private to thawd")
	// ErrBusy: another daemon held the lock for longer than lockWait.
	ErrBusy = errors.New("host state is locked by another daemon")
)

// Change is a host-wide change several daemons share.
type Change interface {
	// Save reads what the host has before any daemon changed it, as Undo
	// will need it.
	Save() ([]byte, error)
	// Apply makes the change; every daemon that acquires it applies it
	// again, so it must be idempotent.
	Apply() error
	// Undo puts back what Save returned. It must work on a change made in
	// part, or not at all.
	Undo(saved []byte) error
}

// Dir is an opened host state directory.
type Dir struct {
	path string
}

const (
	lockFile  = "lock"
	savedFile = "saved"
	lockWait  = 30 * time.Second
)

var keyRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Open opens the host state directory at path, creating it (0700) if
// missing. It must be a real directory owned by this process's user, with
// no group or other permissions, in a parent only root or that user can
// write to: its records decide what is written to the host.
func Open(path string) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("host state directory %q: not an absolute path", path)
	}
	path = filepath.Clean(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("host state directory: %w", err)
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("host state directory: %w", err)
	}
	if err := private(path); err != nil {
		return nil, err
	}
	return &Dir{path: path}, nil
}

// private checks that path is the daemon's alone (see Open).
func private(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("host state directory: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case st.Mode()&os.ModeSymlink != 0 || !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrNotPrivate, path)
	case sys == nil || int(sys.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by another user", ErrNotPrivate, path)
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%w: %s has mode %04o, want 0700", ErrNotPrivate, path, st.Mode().Perm())
	}
	up, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("host state directory: %w", err)
	}
	usys, _ := up.Sys().(*syscall.Stat_t)
	if usys == nil || (usys.Uid != 0 && int(usys.Uid) != os.Geteuid()) || up.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: its parent %s may be written by other users", ErrNotPrivate, filepath.Dir(path))
	}
	return nil
}

// Lease is one daemon's hold on a change.
type Lease struct {
	d      *Dir
	key    string
	change Change
	holder string // the record's file name
}

// Acquire holds the change key for this process: if no live daemon holds
// it, what a dead one left is undone first and the host's present state
// saved; then this process is recorded and the change applied. If Apply
// fails, the record goes and, unless another daemon holds the change, the
// change is undone.
func (d *Dir) Acquire(key string, c Change) (*Lease, error) {
	unlock, err := d.lockKey(key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	live, err := d.recover(key, c)
	if err != nil {
		return nil, err
	}
	kdir := filepath.Join(d.path, key)
	if err := os.MkdirAll(kdir, 0o700); err != nil {
		return nil, fmt.Errorf("host state %s: %w", key, err)
	}
	savedPath := filepath.Join(kdir, savedFile)
	if _, err := os.Lstat(savedPath); errors.Is(err, os.ErrNotExist) {
		saved, err := c.Save()
		if err != nil {
			return nil, fmt.Errorf("host state %s: save: %w", key, err)
		}
		// Saved before anything changes: a crash from here on leaves what
		// the next daemon needs to undo it.
		if err := atomicfile.WriteFile(savedPath, saved); err != nil {
			return nil, fmt.Errorf("host state %s: %w", key, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("host state %s: %w", key, err)
	}
	l := &Lease{d: d, key: key, change: c}
	if l.holder, err = d.addHolder(kdir); err != nil {
		return nil, fmt.Errorf("host state %s: %w", key, err)
	}
	if err := c.Apply(); err != nil {
		aerr := fmt.Errorf("host state %s: apply: %w", key, err)
		_ = os.Remove(filepath.Join(kdir, l.holder))
		if live == 0 {
			return nil, errors.Join(aerr, d.undo(key, c))
		}
		return nil, aerr
	}
	return l, nil
}

// Release lets go of the change; the last live holder undoes it. If Undo
// fails, the saved state stays for the next daemon to try again.
func (l *Lease) Release() error {
	unlock, err := l.d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(filepath.Join(l.d.path, l.key, l.holder)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("host state %s: %w", l.key, err)
	}
	_, err = l.d.recover(l.key, l.change)
	return err
}

// Recover undoes the change key if no live daemon holds it and one that
// died left it; it reports whether it undid anything.
func (d *Dir) Recover(key string, c Change) (bool, error) {
	unlock, err := d.lockKey(key)
	if err != nil {
		return false, err
	}
	defer unlock()
	_, statErr := os.Lstat(filepath.Join(d.path, key, savedFile))
	live, err := d.recover(key, c)
	return err == nil && live == 0 && statErr == nil, err
}

// lockKey checks key and takes the directory's lock.
func (d *Dir) lockKey(key string) (func(), error) {
	if !keyRE.MatchString(key) {
		return nil, fmt.Errorf("host state key %q: use lowercase letters, digits and '-'", key)
	}
	return d.lock()
}

// recover drops the records of dead holders and, if none is alive, undoes
// the change (when a saved state says it was made). It returns the number
// of live holders. The caller holds the lock.
func (d *Dir) recover(key string, c Change) (int, error) {
	kdir := filepath.Join(d.path, key)
	ents, err := os.ReadDir(kdir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("host state %s: %w", key, err)
	}
	boot, err := bootID()
	if err != nil {
		return 0, fmt.Errorf("host state %s: %w", key, err)
	}
	live := 0
	for _, e := range ents {
		if e.Name() == savedFile {
			continue
		}
		p := filepath.Join(kdir, e.Name())
		if h, err := readHolder(p); err == nil && h.alive(boot) {
			live++
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("host state %s: %w", key, err)
		}
	}
	if live > 0 {
		return live, nil
	}
	return 0, d.undo(key, c)
}

// undo puts back the saved state and removes the change's directory. The
// caller holds the lock and has found no live holder.
func (d *Dir) undo(key string, c Change) error {
	kdir := filepath.Join(d.path, key)
	saved, err := os.ReadFile(filepath.Join(kdir, savedFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("host state %s: %w", key, err)
	default:
		if err := c.Undo(saved); err != nil {
			return fmt.Errorf("host state %s: undo: %w", key, err)
		}
	}
	if err := os.RemoveAll(kdir); err != nil {
		return fmt.Errorf("host state %s: %w", key, err)
	}
	return nil
}

// lock takes the directory's lock, waiting at most lockWait.
func (d *Dir) lock() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(d.path, lockFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host state lock: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: %s for %s", ErrBusy, filepath.Join(d.path, lockFile), lockWait)
			}
			return nil, fmt.Errorf("host state lock: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holder is one daemon's record.
type holder struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"` // clock ticks after boot (/proc/PID/stat field 22)
	Boot  string `json:"boot"`  // the kernel's boot id
}

// alive says whether the process the record names is still running: the
// same boot, and a process with that pid that started at that time.
func (h holder) alive(boot string) bool {
	if h.PID <= 0 || h.Boot == "" || h.Boot != boot {
		return false
	}
	start, err := startTime(h.PID)
	return err == nil && start == h.Start
}

// addHolder records this process under kdir and returns the record's name.
func (d *Dir) addHolder(kdir string) (string, error) {
	pid := os.Getpid()
	start, err := startTime(pid)
	if err != nil {
		return "", err
	}
	boot, err := bootID()
	if err != nil {
		return "", err
	}
	h := holder{PID: pid, Start: start, Boot: boot}
	b, _ := json.Marshal(h)
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("%d-%d-%s", pid, start, hex.EncodeToString(r[:]))
	if err := atomicfile.WriteFile(filepath.Join(kdir, name), b); err != nil {
		return "", err
	}
	return name, nil
}

func readHolder(path string) (holder, error) {
	var h holder
	b, err := os.ReadFile(path)
	if err != nil {
		return h, err
	}
	err = json.Unmarshal(b, &h)
	return h, err
}

// startTime is when process pid started, in clock ticks after boot.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStart(b)
}

// parseStart reads field 22 of a /proc/PID/stat line; the command name
// (field 2, in parentheses) may hold spaces and parentheses itself.
func parseStart(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, errors.New("short /proc stat line")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// bootID is the kernel's random id of this boot.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", errors.New("boot id: empty")
	}
	return id, nil
}
