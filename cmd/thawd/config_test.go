package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// thawdRun is one run of thawd's command line with a fake daemon.
type thawdRun struct {
	code           int
	stdout, stderr string
	served         *serveConfig // what the daemon was started with; nil: not started
}

// runThawd runs thawd with args and the environment env (nothing else of
// the process's), serving nothing.
func runThawd(t *testing.T, env map[string]string, args ...string) thawdRun {
	t.Helper()
	var out, errb bytes.Buffer
	c := newCommand(&out, &errb, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	c.defaultConfig = filepath.Join(t.TempDir(), "absent.yaml")
	var r thawdRun
	c.serve = func(_ context.Context, cfg serveConfig, _ *slog.Logger) error {
		r.served = &cfg
		return nil
	}
	r.code = c.execute(context.Background(), args)
	r.stdout, r.stderr = out.String(), errb.String()
	t.Logf("thawd %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// validBase are settings that pass validation on any machine: a temporary
// data directory, a loopback listener, an image directory and a shim path
// (validation does not open them).
func validBase(t *testing.T) []string {
	dir := t.TempDir()
	return []string{"--data-dir", filepath.Join(dir, "data"), "--listen", filepath.Join(dir, "thawd.sock"),
		"--image", dir, "--shim", filepath.Join(dir, "libthaw_shim.so")}
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "thawd.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrecedence: a flag beats the environment, which beats the file,
// which beats the default; lists come whole from one place.
func TestPrecedence(t *testing.T) {
	file := writeConfig(t, `
memory: 256
vcpus: 2
keep-alive: 10s
boot-timeout: 2m
allowed-host: [a.example, b.example]
function-roots: /srv/fn
`)
	env := map[string]string{"THAWD_VCPUS": "3", "THAWD_KEEP_ALIVE": "20s", "THAWD_ALLOWED_ORIGIN": "https://x.example, https://y.example"}
	r := runThawd(t, env, append(validBase(t), "--config", file, "--keep-alive", "30s")...)
	if r.code != 0 || r.served == nil {
		t.Fatalf("exit code %d, served %v", r.code, r.served)
	}
	d := r.served.Daemon
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"memory (file)", d.DefaultMemoryMiB, 256},
		{"vcpus (env over file)", d.DefaultVCPUs, 3},
		{"keep-alive (flag over env and file)", d.KeepAlive, 30 * time.Second},
		{"boot-timeout (file)", d.BootTimeout, 2 * time.Minute},
		{"invoke-timeout (default)", d.InvokeTimeout, 60 * time.Second},
		{"allowed-host (file list)", r.served.AllowedHosts, []string{"a.example", "b.example"}},
		{"allowed-origin (env list)", r.served.AllowedOrigins, []string{"https://x.example", "https://y.example"}},
		{"function-roots (file scalar)", d.FunctionRoots, []string{"/srv/fn"}},
		{"vm uids (default)", d.VMUIDCount, uint32(65536)},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestEveryProblemAtOnce: one run reports each bad value, from the flags,
// the environment and the file, each with where it came from, and never
// starts the daemon.
func TestEveryProblemAtOnce(t *testing.T) {
	file := writeConfig(t, `data-dir: /tmp/thaw-test
listen: [/run/x.sock, "0.0.0.0:7380"]
boot-timeout: soon
memory-mib: 512
snapshot-keep: -2
`)
	env := map[string]string{"THAWD_VCPUS": "two", "THAWD_ADMISSION_QUEUE": "-1"}
	r := runThawd(t, env, "--config", file, "--keep-alive", "5x", "--log-format", "xml", "--tls-cert", "/no/cert",
		"--metrics-listen", "0.0.0.0:9100", "--allowed-origin", "dash.example", "--vm-cpu-weight", "20000", "--keep-alive-max-idle", "-1")
	if r.code != exitFailed || r.served != nil {
		t.Fatalf("exit code %d (served: %v), want %d and no daemon", r.code, r.served != nil, exitFailed)
	}
	for _, want := range []string{
		file + `:4: unknown key "memory-mib"`,
		file + `:3: boot-timeout "soon"`,
		`THAWD_VCPUS="two": not an int`,
		`--keep-alive "5x"`,
		`--log-format "xml"`,
		"listen 0.0.0.0:7380: not a loopback address",
		"--tls-cert and --tls-key go together",
		"--metrics-listen 0.0.0.0:9100",
		`--allowed-origin "dash.example"`,
		"vm cpu weight 20000",
		"--snapshot-keep -2: must not be negative",
		"--keep-alive-max-idle -1: must not be negative",
		"admission queue and timeout must not be negative",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr does not report %q", want)
		}
	}
	if n := strings.Count(r.stderr, "\n  - "); n < 13 {
		t.Errorf("%d problems listed, want at least 13", n)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"not a mapping", "- a\n- b\n", ":1: want a mapping"},
		{"list for a single value", "data-dir: [/a, /b]\n", ":1: data-dir: takes one value"},
		{"mapping value", "listen:\n  a: b\n", ":2: listen: want a value or a list"},
		{"repeated key", "memory: 256\nmemory: 512\n", ":2: memory is already set on line 1"},
		{"empty value", "memory:\n", ":1: memory: no value"},
		{"not a setting", "config: /etc/other.yaml\n", `:1: unknown key "config"`},
		{"a shorthand", "v: true\n", `:1: unknown key "v"`},
		{"bad YAML", "memory: [\n", "yaml"},
	} {
		file := writeConfig(t, c.text)
		r := runThawd(t, nil, append(validBase(t), "--config", file, "config", "check")...)
		if r.code != exitFailed || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", c.name, r.code, r.stderr, c.want)
		}
	}
	// Only comments, or nothing: the defaults.
	for _, text := range []string{"", "# nothing set\n"} {
		r := runThawd(t, nil, append(validBase(t), "--config", writeConfig(t, text))...)
		if r.code != 0 || r.served == nil || r.served.Daemon.DefaultMemoryMiB != 512 {
			t.Errorf("%q: exit %d", text, r.code)
		}
	}
	// A named file must exist; THAWD_CONFIG names one too.
	r := runThawd(t, map[string]string{"THAWD_CONFIG": "/no/such/thawd.yaml"}, validBase(t)...)
	if r.code != exitFailed || !strings.Contains(r.stderr, "/no/such/thawd.yaml") {
		t.Errorf("missing THAWD_CONFIG file: exit %d, %q", r.code, r.stderr)
	}
}

// TestConfigCheck prints the settings in force with their sources, and
// that output is itself a config file giving the same settings.
func TestConfigCheck(t *testing.T) {
	file := writeConfig(t, "memory: 256\n")
	base := validBase(t)
	r := runThawd(t, map[string]string{"THAWD_VCPUS": "2"}, append(base, "--config", file, "config", "check", "--keep-alive", "5s")...)
	if r.code != 0 || r.served != nil {
		t.Fatalf("exit %d, served %v", r.code, r.served != nil)
	}
	for _, want := range []string{"memory: 256 # " + file + ":1", "vcpus: 2 # env THAWD_VCPUS", "keep-alive: 5s # flag",
		"invoke-timeout: 1m0s # default", "listen: [" + base[3] + "] # flag"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config check does not print %q", want)
		}
	}
	again := runThawd(t, nil, "--config", writeConfig(t, r.stdout), "--check-config")
	if again.code != 0 {
		t.Fatalf("the printed settings do not load: %s", again.stderr)
	}
	if got, want := stripComments(again.stdout), stripComments(r.stdout); got != want {
		t.Errorf("settings differ after a round trip:\n%s\nwant\n%s", got, want)
	}
	// An invalid configuration fails the check.
	if r := runThawd(t, nil, append(base, "--memory", "64", "config", "check")...); r.code != exitFailed || !strings.Contains(r.stderr, "below 128") {
		t.Errorf("--memory 64: exit %d, %q", r.code, r.stderr)
	}
}

// stripPaths drops the settings whose defaults depend on where thawd runs.
func stripPaths(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if k, _, _ := strings.Cut(l, ":"); installedPaths[k] == "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// stripComments drops the "# source" comments and the header line.
func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		l, _, _ = strings.Cut(l, " #")
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// TestConfigDefault: the printed default file loads, describes every key,
// and gives the same settings as no file at all.
func TestConfigDefault(t *testing.T) {
	r := runThawd(t, nil, "config", "default")
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, want := range []string{"# default guest memory in MiB\nmemory: 512\n", "keep-alive: 1m0s\n", "listen: []\n", "log-format: text\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("default config lacks %q", want)
		}
	}
	base := validBase(t)
	withFile := runThawd(t, nil, append(base, "--config", writeConfig(t, r.stdout), "config", "check")...)
	without := runThawd(t, nil, append(base, "--config", writeConfig(t, ""), "config", "check")...)
	if withFile.code != 0 || without.code != 0 {
		t.Fatalf("exit %d, %d", withFile.code, without.code)
	}
	// The same settings, but for the paths: the file names the installed
	// ones, whatever the build tree or home directory this test runs in.
	if a, b := stripPaths(stripComments(withFile.stdout)), stripPaths(stripComments(without.stdout)); a != b {
		t.Errorf("the default file changes settings:\n%s\nwant\n%s", a, b)
	}
	for _, want := range []string{"\nimage: /var/cache/thaw/images/current\n", "\nshim: /usr/lib/thaw/libthaw_shim.so\n",
		"\nsnapbpf-object: /usr/lib/thaw/snapbpf_capture.bpf.o\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("default config lacks the installed path %q", want)
		}
	}
	exe, _ := os.Executable()
	home, _ := os.UserHomeDir()
	for _, local := range []string{filepath.Dir(exe), home, "/.cache/"} {
		if local != "" && local != "/" && strings.Contains(r.stdout, local) {
			t.Errorf("default config names %s, a path of this machine", local)
		}
	}
	settings := 0
	newSettings().fs.VisitAll(func(*pflag.Flag) { settings++ })
	// base's settings are flags; the rest come from the file.
	if n := strings.Count(withFile.stdout, "thawd.yaml:"); n != settings-len(base)/2 {
		t.Errorf("%d settings came from the default file, want every one not given as a flag (%d)", n, settings-len(base)/2)
	}
}

// TestDeployConfig: the packaged /etc/thaw/thawd.yaml names only settings
// thawd knows, with values that parse.
func TestDeployConfig(t *testing.T) {
	s := newSettings()
	f, err := loadConfigFile(filepath.Join("..", "..", "deploy", "thawd.yaml"), s.fs)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(func(string) (string, bool) { return "", false }, f)
	if len(s.bad) > 0 {
		t.Errorf("bad values: %v", s.bad)
	}
}

// TestFlagSpellings: the spellings thawd accepted before (Go's flag
// package: -name, --v) still work, and --version prints the build.
func TestFlagSpellings(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-data-dir", dir, "-listen=" + dir + "/s.sock", "-memory", "256", "-v"},
		{"--data-dir=" + dir, "--listen", dir + "/s.sock", "--memory=256", "--v"},
		{"--data-dir", dir, "--listen", dir + "/s.sock", "--memory", "256", "--verbose"},
	} {
		args = append(args, "--image", dir, "--shim", dir+"/shim.so")
		r := runThawd(t, nil, args...)
		if r.code != 0 || r.served == nil || r.served.Daemon.DataDir != dir || r.served.Daemon.DefaultMemoryMiB != 256 {
			t.Errorf("%v: exit %d, %+v", args, r.code, r.served)
		}
	}
	for _, v := range []string{"--version", "-version"} {
		r := runThawd(t, nil, v)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "thawd ") || r.served != nil {
			t.Errorf("%s: exit %d, %q", v, r.code, r.stdout)
		}
	}
	for _, args := range [][]string{{"--no-such-flag"}, {"extra-argument"}, {"-data-dir"}} {
		if r := runThawd(t, nil, args...); r.code != exitUsage || r.served != nil {
			t.Errorf("%v: exit %d, want %d", args, r.code, exitUsage)
		}
	}
}

// TestUsageDefaults: the flag list states each default once, and an empty
// list as none (the lenient wrapper hides list types from pflag).
func TestUsageDefaults(t *testing.T) {
	usage := newSettings().fs.FlagUsages()
	if strings.Contains(usage, "(default [])") {
		t.Errorf("usage shows an empty list as a default:\n%s", usage)
	}
	for _, line := range strings.Split(usage, "\n") {
		if strings.Count(line, "(default ") > 1 {
			t.Errorf("default stated twice: %s", line)
		}
	}
	if !strings.Contains(usage, "(default /run/thaw/thawd.sock)") {
		t.Error("--listen's default socket is missing from the usage")
	}
}

// TestConfigCheckComputed: the settings thawd computes at start are
// printed as it would use them (listener, socket group, node name, store
// and token paths, memory bounds), never as their zero placeholders, and
// the printed file gives the same settings again.
func TestConfigCheckComputed(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--data-dir", filepath.Join(dir, "data"), "--image", dir, "--shim", filepath.Join(dir, "libthaw_shim.so")}
	r := runThawd(t, nil, append(base, "config", "check")...)
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	host, _ := os.Hostname()
	for _, want := range []string{"listen: [" + defaultSocket + "] # default: the Unix socket", "node-name: " + host + " # default: the host name",
		"socket-group: root # default: root's group", "store-dir: /dev/shm/thaw-store/", "token-file: \"\" # default: " + filepath.Join(dir, "data", "token"),
		"max-vms: ", "# default: host memory", "vm-memory-budget: ", "# default: nine tenths of host memory", "vmm-pool-memory: "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config check does not print %q", want)
		}
	}
	for _, zero := range []string{"listen: []", "max-vms: 0", "vm-memory-budget: 0", "node-name: \"\"", "store-dir: \"\"", "vmm-pool-memory: 0",
		"keep-alive-min-available: 0"} {
		if strings.Contains(r.stdout, zero) {
			t.Errorf("config check prints the placeholder %q", zero)
		}
	}
	again := runThawd(t, nil, "--config", writeConfig(t, r.stdout), "config", "check")
	if again.code != 0 {
		t.Fatalf("the printed settings do not load: %s", again.stderr)
	}
	if got, want := stripComments(again.stdout), stripComments(r.stdout); got != want {
		t.Errorf("settings differ after a round trip:\n%s\nwant\n%s", got, want)
	}
	// What is set is printed as set, not computed.
	r = runThawd(t, nil, append(base, "--max-vms", "3", "--node-name", "n1", "config", "check")...)
	if !strings.Contains(r.stdout, "max-vms: 3 # flag") || !strings.Contains(r.stdout, "node-name: n1 # flag") {
		t.Errorf("set values are not printed as set:\n%s", r.stdout)
	}
}
