package hoststate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// setting is a host setting kept in a file, changed to "1" while held, as
// net.ipv4.ip_forward is by full egress; it counts what was done to it.
type setting struct {
	path                string
	mu                  sync.Mutex
	saves, applies, uns int
	failApply, failUndo bool
}

func newSetting(t *testing.T, value string) *setting {
	s := &setting{path: filepath.Join(t.TempDir(), "setting")}
	if err := os.WriteFile(s.path, []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *setting) Save() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves++
	return os.ReadFile(s.path)
}

func (s *setting) Apply() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applies++
	if s.failApply {
		return errors.New("apply refused")
	}
	return os.WriteFile(s.path, []byte("1"), 0o600)
}

func (s *setting) Undo(saved []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uns++
	if s.failUndo {
		return errors.New("undo refused")
	}
	return os.WriteFile(s.path, saved, 0o600)
}

// acquired is a new Dir, a setting of "0", and a lease of it under key
// egress-1.
func acquired(t *testing.T) (*Dir, *setting, *Lease) {
	t.Helper()
	d := openDir(t)
	s := newSetting(t, "0")
	l, err := d.Acquire("egress-1", s)
	if err != nil {
		t.Fatal(err)
	}
	return d, s, l
}

// releaseRestores releases l, which must put s back to "0".
func releaseRestores(t *testing.T, l *Lease, s *setting) {
	t.Helper()
	if err := l.Release(); err != nil || s.value(t) != "0" {
		t.Fatalf("release: %v value %q", err, s.value(t))
	}
}

func (s *setting) value(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func openDir(t *testing.T) *Dir {
	t.Helper()
	d, err := Open(filepath.Join(t.TempDir(), "hoststate"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// keyFiles lists what the change's directory holds ("" if it is gone).
func keyFiles(t *testing.T, d *Dir, key string) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(d.Path(), key))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, ",")
}

// The first holder saves, every holder applies, the last one to let go
// puts back what the host had: 0 or 1 alike.
func TestLastHolderRestores(t *testing.T) {
	for _, orig := range []string{"0", "1"} {
		t.Run("orig="+orig, func(t *testing.T) {
			d := openDir(t)
			s := newSetting(t, orig)
			a, err := d.Acquire("egress-1", s)
			if err != nil {
				t.Fatal(err)
			}
			b, err := d.Acquire("egress-1", s)
			if err != nil {
				t.Fatal(err)
			}
			if s.saves != 1 || s.applies != 2 || s.value(t) != "1" {
				t.Fatalf("two holders: saves %d applies %d value %q", s.saves, s.applies, s.value(t))
			}
			if err := a.Release(); err != nil {
				t.Fatal(err)
			}
			if s.uns != 0 || s.value(t) != "1" {
				t.Fatalf("undone while a holder is left: undos %d value %q", s.uns, s.value(t))
			}
			if err := b.Release(); err != nil {
				t.Fatal(err)
			}
			if s.uns != 1 || s.value(t) != orig {
				t.Fatalf("after the last release: undos %d value %q, want %q", s.uns, s.value(t), orig)
			}
			if f := keyFiles(t, d, "egress-1"); f != "" {
				t.Fatalf("records left: %s", f)
			}
		})
	}
}

// Each key is its own change.
func TestKeysAreSeparate(t *testing.T) {
	d := openDir(t)
	s1, s2 := newSetting(t, "0"), newSetting(t, "0")
	a, err := d.Acquire("egress-1", s1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Acquire("egress-2", s2)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	if s1.value(t) != "1" || s2.value(t) != "0" {
		t.Fatalf("values %q %q", s1.value(t), s2.value(t))
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
}

// writeRecord puts a holder record as another daemon would have.
func writeRecord(t *testing.T, d *Dir, key, name string, h holder) {
	t.Helper()
	b, _ := json.Marshal(h)
	if err := os.WriteFile(filepath.Join(d.Path(), key, name), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// exitedPID is the pid of a process that has exited and been reaped.
func exitedPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

// Records of dead daemons are told from live ones: an exited pid, a live
// pid that started at another time (recycled), another boot, a record
// that is not one. Only when none is alive is the change undone.
func TestRecoverTellsDeadFromLive(t *testing.T) {
	self, err := startTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	boot, err := bootID()
	if err != nil {
		t.Fatal(err)
	}
	dead := map[string]holder{
		"exited":         {PID: exitedPID(t), Start: 1, Boot: boot},
		"recycled":       {PID: os.Getpid(), Start: self + 1, Boot: boot},
		"earlier-boot":   {PID: os.Getpid(), Start: self, Boot: "00000000-0000-0000-0000-000000000000"},
		"no-pid":         {Start: self, Boot: boot},
		"half-written":   {}, // replaced below by bytes that are not JSON
		"without-a-boot": {PID: os.Getpid(), Start: self},
	}
	for name, h := range dead {
		t.Run(name, func(t *testing.T) {
			d, s, l := acquired(t)
			// The lease's own record goes, as a crash leaves nothing else.
			if err := os.Remove(filepath.Join(d.Path(), "egress-1", l.holder)); err != nil {
				t.Fatal(err)
			}
			writeRecord(t, d, "egress-1", "other", h)
			if name == "half-written" {
				os.WriteFile(filepath.Join(d.Path(), "egress-1", "other"), []byte(`{"pid":`), 0o600)
			}
			undone, err := d.Recover("egress-1", s)
			if err != nil || !undone || s.value(t) != "0" {
				t.Fatalf("recover: undone %v err %v value %q", undone, err, s.value(t))
			}
			if f := keyFiles(t, d, "egress-1"); f != "" {
				t.Fatalf("records left: %s", f)
			}
		})
	}
	t.Run("live", func(t *testing.T) {
		d, s, l := acquired(t)
		writeRecord(t, d, "egress-1", "dead", dead["exited"])
		undone, err := d.Recover("egress-1", s)
		if err != nil || undone || s.value(t) != "1" {
			t.Fatalf("recover under a live holder: undone %v err %v value %q", undone, err, s.value(t))
		}
		if f := keyFiles(t, d, "egress-1"); strings.Contains(f, "dead") {
			t.Fatalf("a dead record stayed: %s", f)
		}
		releaseRestores(t, l, s)
	})
}

// Recover with nothing recorded undoes nothing.
func TestRecoverNothing(t *testing.T) {
	d := openDir(t)
	s := newSetting(t, "1")
	undone, err := d.Recover("egress-1", s)
	if err != nil || undone || s.uns != 0 {
		t.Fatalf("undone %v err %v undos %d", undone, err, s.uns)
	}
}

// A new holder after a crash first undoes the dead one's change, so what
// it saves is what the host had before any daemon, not the change.
func TestAcquireAfterCrashSavesTheOriginal(t *testing.T) {
	d, s, l := acquired(t)
	os.Remove(filepath.Join(d.Path(), "egress-1", l.holder)) // the holder crashed
	l2, err := d.Acquire("egress-1", s)
	if err != nil {
		t.Fatal(err)
	}
	if s.uns != 1 || s.saves != 2 {
		t.Fatalf("undos %d saves %d", s.uns, s.saves)
	}
	releaseRestores(t, l2, s)
}

// A change that cannot be applied is undone unless another daemon holds
// it, and this process is not recorded as a holder.
func TestApplyFails(t *testing.T) {
	d := openDir(t)
	s := newSetting(t, "0")
	s.failApply = true
	if _, err := d.Acquire("egress-1", s); err == nil || !strings.Contains(err.Error(), "apply refused") {
		t.Fatalf("acquire: %v", err)
	}
	if s.uns != 1 || keyFiles(t, d, "egress-1") != "" {
		t.Fatalf("alone: undos %d records %q", s.uns, keyFiles(t, d, "egress-1"))
	}
	s.failApply = false
	l, err := d.Acquire("egress-1", s)
	if err != nil {
		t.Fatal(err)
	}
	s.failApply = true
	if _, err := d.Acquire("egress-1", s); err == nil {
		t.Fatal("acquire applied nothing and succeeded")
	}
	if s.uns != 1 || s.value(t) != "1" {
		t.Fatalf("undone under a live holder: undos %d value %q", s.uns, s.value(t))
	}
	if f := keyFiles(t, d, "egress-1"); strings.Count(f, ",") != 1 {
		t.Fatalf("records: %s (want saved and one holder)", f)
	}
	releaseRestores(t, l, s)
}

// An undo that fails keeps the saved state: the next daemon tries again.
func TestUndoFailsKeepsSaved(t *testing.T) {
	d, s, l := acquired(t)
	s.failUndo = true
	if err := l.Release(); err == nil || !strings.Contains(err.Error(), "undo refused") {
		t.Fatalf("release: %v", err)
	}
	if keyFiles(t, d, "egress-1") != savedFile {
		t.Fatalf("records: %q", keyFiles(t, d, "egress-1"))
	}
	s.failUndo = false
	if undone, err := d.Recover("egress-1", s); err != nil || !undone || s.value(t) != "0" {
		t.Fatalf("recover: %v %v value %q", undone, err, s.value(t))
	}
}

// Holders that come and go at once, each through its own descriptor of
// the lock: the change is saved once per busy period and the host ends as
// it started.
func TestConcurrentHolders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hoststate")
	s := newSetting(t, "0")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := Open(path)
			if err != nil {
				errs <- err
				return
			}
			for j := 0; j < 4; j++ {
				l, err := d.Acquire("egress-1", s)
				if err != nil {
					errs <- err
					return
				}
				if v, _ := os.ReadFile(s.path); string(v) != "1" {
					errs <- fmt.Errorf("held, but the setting is %q", v)
				}
				if err := l.Release(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s.value(t) != "0" || s.saves != s.uns || s.applies != 64 {
		t.Fatalf("value %q saves %d undos %d applies %d", s.value(t), s.saves, s.uns, s.applies)
	}
}

// A holder killed with SIGKILL (a real process) leaves its change; the next
// Recover undoes it.
func TestKilledHolder(t *testing.T) {
	d := openDir(t)
	s := newSetting(t, "0")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$")
	cmd.Env = append(os.Environ(), "HOSTSTATE_HELPER="+d.Path(), "HOSTSTATE_SETTING="+s.path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := out.Read(b)
	if !strings.Contains(string(b[:n]), "held") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %q", b[:n])
	}
	if undone, err := d.Recover("egress-1", s); err != nil || undone || s.value(t) != "1" {
		t.Fatalf("recover while the holder lives: %v %v value %q", undone, err, s.value(t))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if undone, err := d.Recover("egress-1", s); err != nil || !undone || s.value(t) != "0" {
		t.Fatalf("recover after the kill: %v %v value %q", undone, err, s.value(t))
	}
}

// TestHelperHolder is TestKilledHolder's other process: it holds the
// change, says so and waits to be killed.
func TestHelperHolder(t *testing.T) {
	dir := os.Getenv("HOSTSTATE_HELPER")
	if dir == "" {
		t.Skip("helper process of TestKilledHolder")
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &setting{path: os.Getenv("HOSTSTATE_SETTING")}
	if _, err := d.Acquire("egress-1", s); err != nil {
		t.Fatal(err)
	}
	fmt.Println("held")
	time.Sleep(time.Minute)
}

// Open refuses a directory someone else could write: a symbolic link,
// group or other permissions, another owner, a parent others can write.
func TestOpenRefusesForeignDirectories(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	base := t.TempDir()
	link := filepath.Join(base, "link")
	os.Mkdir(filepath.Join(base, "real"), 0o700)
	os.Symlink(filepath.Join(base, "real"), link)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o770)
	foreign := filepath.Join(base, "foreign")
	os.Mkdir(foreign, 0o700)
	os.Chown(foreign, 12345, 12345)
	shared := filepath.Join(base, "shared")
	os.Mkdir(shared, 0o700)
	os.Chmod(shared, 0o777)
	for _, p := range []string{link, open, foreign, filepath.Join(shared, "hoststate")} {
		if _, err := Open(p); !errors.Is(err, ErrNotPrivate) {
			t.Errorf("%s: %v, want %v", p, err, ErrNotPrivate)
		}
	}
	if _, err := Open("relative/dir"); err == nil {
		t.Error("a relative path was accepted")
	}
}

// A key is one path element of a known form.
func TestBadKey(t *testing.T) {
	d := openDir(t)
	s := newSetting(t, "0")
	for _, k := range []string{"", "../x", "a/b", "UPPER", ".", strings.Repeat("a", 64)} {
		if _, err := d.Acquire(k, s); err == nil {
			t.Errorf("key %q accepted", k)
		}
		if _, err := d.Recover(k, s); err == nil {
			t.Errorf("key %q accepted by Recover", k)
		}
	}
	if s.saves != 0 || s.applies != 0 {
		t.Fatalf("a bad key changed something: saves %d applies %d", s.saves, s.applies)
	}
}

// The lock excludes: a second taker waits until the first lets go.
func TestLockExcludes(t *testing.T) {
	d := openDir(t)
	unlock, err := d.lock()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := d.lock()
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second lock taken while the first is held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestParseStart(t *testing.T) {
	for _, tt := range []struct {
		line string
		want uint64
		ok   bool
	}{
		{"1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42 1000 10", 42, true},
		{"7 (a) b (c)) R 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 99 1000 10", 99, true},
		{"7 (short) R 0 1", 0, false},
		{"no parenthesis", 0, false},
		{"7 (x) R 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 -3 1000 10", 0, false},
	} {
		got, err := parseStart([]byte(tt.line))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("%q: %d %v", tt.line, got, err)
		}
	}
}

// Path is the directory.
func (d *Dir) Path() string { return d.path }
