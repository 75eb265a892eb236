package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/logtest"
	"github.com/thaw-dev/thaw/internal/thawcache"
)

// Where the package puts what thawd needs.
const (
	unitPath   = "/lib/systemd/system/thawd.service"
	shimPath   = "/usr/lib/thaw/libthaw_shim.so"
	bpfPath    = "/usr/lib/thaw/snapbpf_capture.bpf.o"
	configPath = "/etc/thaw/thawd.yaml"
)

// builtPackage is the package make deb built (build/thaw_*.deb), or
// $THAW_DEB.
func builtPackage(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("THAW_DEB"); p != "" {
		return p
	}
	debs, _ := filepath.Glob(filepath.Join("..", "build", "thaw_*.deb"))
	if len(debs) != 1 {
		t.Skipf("want one package in build/ (make deb builds it), found %v", debs)
	}
	p, err := filepath.Abs(debs[0])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// imageDir is the guest image the installed thawd opens at start.
func imageDir(t *testing.T) string {
	dir := os.Getenv("THAW_IMAGE")
	if dir == "" {
		dir = thawcache.Path("images", "current")
	}
	if _, err := os.Stat(filepath.Join(dir, "image.json")); err != nil {
		t.Skipf("no guest image at %s (make image builds it): thawd opens it at start: %v", dir, err)
	}
	return dir
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestInstalledPackage installs the package on this machine, runs thawd
// from it the way its unit does (there is no systemd here to start it),
// drives it with the installed thaw, then removes and purges the package.
func TestInstalledPackage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("installing a package needs root")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg on this machine")
	}
	deb := builtPackage(t)
	img := imageDir(t)
	if exec.Command("dpkg-query", "-W", "thaw").Run() == nil {
		t.Skip("a thaw package is installed already: this test would replace it")
	}
	if _, err := os.Stat("/etc/thaw"); err == nil {
		t.Skip("/etc/thaw exists: this test would overwrite an operator's configuration")
	}
	_, groupErr := user.LookupGroup("thaw")
	groupExisted := groupErr == nil

	run(t, "dpkg", "-i", deb)
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "thaw").CombinedOutput(); err != nil {
			t.Errorf("dpkg --purge thaw: %v\n%s", err, out)
		}
		if !groupExisted {
			exec.Command("groupdel", "thaw").Run()
		}
	})
	grp, debVersion := checkInstalledFiles(t)

	t.Run("systemd-analyze verify", func(t *testing.T) {
		if _, err := exec.LookPath("systemd-analyze"); err != nil {
			t.Skip("systemd-analyze is not installed (package systemd): the unit is not verified")
		}
		out, err := exec.Command("systemd-analyze", "verify", unitPath).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
		}
	})

	argv, env := execStart(t, unitPath)
	if len(argv) != 3 || argv[0] != "/usr/bin/thawd" || argv[1] != "--config" || argv[2] != configPath {
		t.Fatalf("ExecStart %q, want /usr/bin/thawd --config %s", argv, configPath)
	}
	pc := writeTestConfig(t, img)
	argv[2] = pc.cfg
	checkConfigDefaults(t, argv, env, pc)
	checkInstalledDaemon(t, argv, env, pc, grp, debVersion)
	removeAndPurge(t)
}

// checkInstalledFiles checks the files, the conffile and the group the
// package installed, and returns the group and the package's version.
func checkInstalledFiles(t *testing.T) (*user.Group, string) {
	t.Helper()
	for _, p := range []string{"/usr/bin/thawd", "/usr/bin/thaw", shimPath, bpfPath, unitPath, configPath,
		"/usr/lib/sysusers.d/thaw.conf", "/usr/share/bash-completion/completions/thaw",
		"/usr/share/zsh/vendor-completions/_thaw", "/usr/share/fish/vendor_completions.d/thaw.fish",
		"/usr/share/doc/thaw/copyright", "/usr/share/doc/thaw/operations.md"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if conf := run(t, "dpkg-query", "-W", "-f", "${Conffiles}", "thaw"); !strings.Contains(conf, configPath) {
		t.Errorf("conffiles: %q, want %s", conf, configPath)
	}
	grp, err := user.LookupGroup("thaw")
	if err != nil {
		t.Fatalf("postinst did not create the group thaw: %v", err)
	}
	return grp, run(t, "dpkg-query", "-W", "-f", "${Version}", "thaw")
}

// pkgConfig is the test's config file for the installed thawd and the
// paths it names.
type pkgConfig struct {
	cfg, dataDir, sock string
}

// writeTestConfig writes the installed config file with a data
// directory, socket and store of the test's own added: the unit's
// command line runs with it in place of the installed one. The installed
// file's setting (socket-group) is kept.
func writeTestConfig(t *testing.T, img string) pkgConfig {
	t.Helper()
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "thaw-pkg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "thawd.sock")
	store := filepath.Join("/dev/shm", "thaw-pkg-"+filepath.Base(sockDir))
	t.Cleanup(func() { os.RemoveAll(store) })
	installed, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "thawd.yaml")
	text := string(installed) + fmt.Sprintf("\ndata-dir: %s\nlisten: [%s]\nimage: %s\naccel: tcg\nmemory: 256\nstore-dir: %s\n",
		filepath.Join(dir, "data"), sock, img, store)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return pkgConfig{cfg: cfg, dataDir: filepath.Join(dir, "data"), sock: sock}
}

// checkConfigDefaults checks the settings in force: the interposer and
// the eBPF object are the packaged ones, found without being configured.
func checkConfigDefaults(t *testing.T, argv, env []string, pc pkgConfig) {
	t.Helper()
	check := exec.Command(argv[0], append(argv[1:], "config", "check")...)
	check.Env = append(os.Environ(), env...)
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("thawd config check: %v\n%s", err, out)
	}
	for _, want := range []string{"shim: " + shimPath + " # default", "snapbpf-object: " + bpfPath + " # default",
		"socket-group: thaw # " + pc.cfg, "data-dir: " + pc.dataDir + " # " + pc.cfg} {
		if !strings.Contains(string(out), want) {
			t.Errorf("thawd config check does not say %q:\n%s", want, out)
		}
	}
}

// checkInstalledDaemon starts the installed thawd, drives it with the
// installed thaw, and stops it with SIGTERM.
func checkInstalledDaemon(t *testing.T, argv, env []string, pc pkgConfig, grp *user.Group, debVersion string) {
	t.Helper()
	sock := pc.sock
	d := startDaemon(t, argv, env)
	thaw := func(args ...string) string {
		return run(t, "/usr/bin/thaw", append([]string{"--url", "unix:" + sock}, args...)...)
	}
	if !waitFor(60*time.Second, func() bool { return exec.Command("/usr/bin/thaw", "--url", "unix:"+sock, "info").Run() == nil }) {
		t.Fatalf("the installed thawd did not answer within 60 s:\n%s", d.log())
	}
	info := thaw("info")
	t.Logf("thaw info:\n%s", info)
	for _, want := range []string{"Data dir:", pc.dataDir, "snapbpf", "tcg"} {
		if !strings.Contains(info, want) {
			t.Errorf("thaw info does not say %q:\n%s", want, info)
		}
	}
	version := thaw("version")
	t.Logf("thaw version:\n%s", version)
	m := regexp.MustCompile(`(?m)^thawd (\S+) at unix:`).FindStringSubmatch(version)
	if m == nil {
		t.Fatalf("thaw version names no daemon:\n%s", version)
	}
	if stamped := strings.ReplaceAll(m[1], "-", "."); !strings.HasSuffix(debVersion, stamped) || m[1] == "dev" {
		t.Errorf("the daemon's version %q is not the package's %q", m[1], debVersion)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if gid := strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Gid)); gid != grp.Gid {
		t.Errorf("socket group %s, want thaw (%s): the installed config's socket-group was not used", gid, grp.Gid)
	}
	logged := d.log()
	for _, want := range []string{"shim=" + shimPath, "snapbpf_object=" + bpfPath} {
		if !strings.Contains(logged, want) {
			t.Errorf("thawd's start-up log does not name %q:\n%s", want, logged)
		}
	}

	// SIGTERM, as systemd's KillMode=mixed sends it to thawd alone.
	if err := d.stop(); err != nil {
		t.Errorf("thawd stopped with %v:\n%s", err, d.log())
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after stopping: %v", err)
	}
}

// removeAndPurge removes the package, which keeps the conffile, then
// purges it, which removes it.
func removeAndPurge(t *testing.T) {
	t.Helper()
	run(t, "dpkg", "-r", "thaw")
	if _, err := os.Stat("/usr/bin/thawd"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/usr/bin/thawd after dpkg -r: %v", err)
	}
	if _, err := os.Stat(configPath); err != nil {
		t.Errorf("dpkg -r removed the conffile: %v", err)
	}
	run(t, "dpkg", "--purge", "thaw")
	if _, err := os.Stat(configPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after purge: %v", configPath, err)
	}
}

// execStart reads the unit's ExecStart command line and Environment
// assignments.
func execStart(t *testing.T, unit string) (argv, env []string) {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok {
			switch k {
			case "ExecStart":
				argv = strings.Fields(v)
			case "Environment":
				env = append(env, strings.Fields(v)...)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if argv == nil {
		t.Fatalf("%s has no ExecStart", unit)
	}
	return argv, env
}

// daemon is the installed thawd running as the test's child.
type daemon struct {
	cmd    *exec.Cmd
	out    *logtest.Buffer
	done   chan error
	exited bool
}

func startDaemon(t *testing.T, argv, env []string) *daemon {
	t.Helper()
	d := &daemon{out: &logtest.Buffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if !d.exited {
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

func (d *daemon) log() string { return d.out.String() }

// stop sends SIGTERM and waits up to 60 s for thawd to exit.
func (d *daemon) stop() error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	select {
	case err := <-d.done:
		d.exited = true
		return err
	case <-ctx.Done():
		return errors.New("still running 60 s after SIGTERM")
	}
}

func waitFor(limit time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return false
}
