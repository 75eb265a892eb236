package main

import (
	"fmt"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/store"
)

// computedSetting is a setting whose default thawd computes at start: the
// value it would use on this host (none: only a comment says what), and
// how it comes to be.
type computedSetting struct {
	vals []string
	how  string
}

// computed are the settings left at a default that thawd computes at
// start, with what it would compute now: the listeners, the node name,
// the socket's group, the memory store and token paths, and the bounds
// that come from the host's memory.
func (s *settings) computed() map[string]computedSetting {
	cfg, d := s.serve, s.serve.Daemon
	eff := d.WithDefaults()
	host := daemon.HostMemoryMiB()
	m := map[string]computedSetting{}
	if len(cfg.Listen) == 0 {
		m["listen"] = computedSetting{[]string{defaultSocket}, "the Unix socket"}
	}
	if cfg.NodeName == "" {
		if n := nodeName(cfg); n != "" {
			m["node-name"] = computedSetting{[]string{n}, "the host name"}
		}
	}
	if cfg.SocketGroup == "" {
		if g, err := user.LookupGroupId(strconv.Itoa(rootGID())); err == nil {
			m["socket-group"] = computedSetting{[]string{g.Name}, "root's group"}
		}
	}
	if cfg.TokenFile == "" {
		m["token-file"] = computedSetting{nil, fmt.Sprintf("%s, created at the first start with a TCP listener",
			filepath.Join(d.DataDir, api.TokenFileName))}
	}
	if d.StoreDir == "" && d.StoreDeviceFile == "" {
		m["store-dir"] = computedSetting{[]string{store.DefaultDirFor(d.DataDir)}, "one per data directory under " + store.DefaultDir}
	}
	perVM := d.DefaultMemoryMiB + eff.VMMemoryOverheadMiB
	for _, c := range []struct {
		name      string
		set, used int
		how       string
	}{
		{"max-vms", d.MaxVMs, eff.MaxVMs, fmt.Sprintf("host memory (%d MiB) over memory plus vm-memory-overhead (%d MiB)", host, perVM)},
		{"vm-memory-budget", d.VMMemoryBudgetMiB, eff.VMMemoryBudgetMiB, fmt.Sprintf("nine tenths of host memory (%d MiB)", host)},
		{"keep-alive-min-available", d.KeepAliveMinAvailableMiB, eff.KeepAliveMinAvailableMiB, fmt.Sprintf("a twentieth of host memory (%d MiB), at least 512", host)},
		{"vmm-pool-memory", d.VMMPoolMemoryMiB, eff.VMMPoolMemoryMiB, fmt.Sprintf("an eighth of host memory (%d MiB)", host)},
	} {
		if c.set == 0 {
			m[c.name] = computedSetting{[]string{strconv.Itoa(c.used)}, c.how}
		}
	}
	return m
}

// rootGID is root's primary group (0 without a user database).
func rootGID() int {
	gid, err := lookupGroup("")
	if err != nil {
		return 0
	}
	return gid
}
