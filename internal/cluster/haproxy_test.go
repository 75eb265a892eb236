package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHAProxyConfigChecks: the generated configuration passes haproxy -c
// (the HAProxy this host runs) and says what docs/cluster.md promises.
func TestHAProxyConfigChecks(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (scripts/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if _, err := NewCA(dir, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := LBConfig{Listen: "127.0.0.1:7480", CAFile: ca, StatsSock: filepath.Join(dir, "s.sock"),
		Backends: []Backend{{"node-1", "10.200.0.11:7443"}, {"node-2", "10.200.0.12:7443"}}}
	var sb strings.Builder
	if err := cfg.Render(&sb); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s\n%s", err, out, sb.String())
	}
	for _, want := range []string{"hash-type consistent", "retry-on conn-failure", "option redispatch", "inter 500ms", "fall 2 rise 1",
		"verify required ca-file " + ca, "uri /v1/health", "use-server node-2 if { req.hdr(thaw-node) -m str node-2 }"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("config lacks %q", want)
		}
	}
	for _, bad := range []string{"empty-response", "response-timeout", "all-retryable-errors"} {
		if strings.Contains(sb.String(), bad) {
			t.Errorf("config retries on %s: an invocation could run twice", bad)
		}
	}
}

// TestRenderRefusesBadInput: names that would break the configuration
// and missing parts are errors.
func TestRenderRefusesBadInput(t *testing.T) {
	good := LBConfig{Listen: "127.0.0.1:1", CAFile: "/ca.pem", StatsSock: "/s", Backends: []Backend{{"n1", "10.0.0.1:1"}}}
	for name, edit := range map[string]func(*LBConfig){
		"no backends":     func(c *LBConfig) { c.Backends = nil },
		"no listen":       func(c *LBConfig) { c.Listen = "" },
		"name with space": func(c *LBConfig) { c.Backends[0].Name = "n 1" },
		"name with brace": func(c *LBConfig) { c.Backends[0].Name = "n}1" },
		"backend no addr": func(c *LBConfig) { c.Backends[0].Addr = "" },
		"no ca":           func(c *LBConfig) { c.CAFile = "" },
	} {
		c := good
		c.Backends = append([]Backend(nil), good.Backends...)
		edit(&c)
		if err := c.Render(&strings.Builder{}); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}
