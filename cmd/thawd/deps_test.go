package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDepsSettings: the package index, find-links, pip's interpreter,
// timeout, layer format and cache budget come from flags, the environment
// or the config file like every setting; bad values are listed at start.
func TestDepsSettings(t *testing.T) {
	r := runThawd(t, nil, append(validBase(t), "--pip-index-url", "http://127.0.0.1:3141/simple",
		"--pip-find-links", "/srv/wheels", "--pip-find-links", "http://127.0.0.1:8000/wheels/", "--pip-python", "/usr/bin/python3.11",
		"--pip-timeout", "5s", "--deps-layer-format", "ext4", "--deps-cache-budget", "300")...)
	if r.code != 0 || r.served == nil {
		t.Fatalf("exit %d", r.code)
	}
	d := r.served.Daemon.Deps
	if d.IndexURL != "http://127.0.0.1:3141/simple" || !slices.Equal(d.FindLinks, []string{"/srv/wheels", "http://127.0.0.1:8000/wheels/"}) ||
		d.Python != "/usr/bin/python3.11" || d.Timeout != 5*time.Second || d.Format != "ext4" || d.Budget != 300<<20 {
		t.Fatalf("deps config from flags: %+v", d)
	}

	env := map[string]string{"THAWD_PIP_INDEX_URL": "none", "THAWD_PIP_FIND_LINKS": "/a,/b", "THAWD_DEPS_CACHE_BUDGET": "-1"}
	cfg := writeConfig(t, "pip-python: python3.11\ndeps-layer-format: erofs\npip-find-links: [/from/file]\n")
	r = runThawd(t, env, append(validBase(t), "--config", cfg)...)
	if r.code != 0 || r.served == nil {
		t.Fatalf("exit %d", r.code)
	}
	d = r.served.Daemon.Deps
	if d.IndexURL != "none" || !slices.Equal(d.FindLinks, []string{"/a", "/b"}) || d.Python != "python3.11" || d.Format != "erofs" || d.Budget != -1 {
		t.Fatalf("deps config from the environment and the file: %+v", d)
	}

	r = runThawd(t, nil, append(validBase(t), "--deps-layer-format", "squashfs", "--pip-timeout", "-1s")...)
	for _, want := range []string{`layer format "squashfs": want erofs or ext4`, "pip timeout -1s must not be negative"} {
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("bad deps settings: exit %d, stderr lacks %q", r.code, want)
		}
	}
}
