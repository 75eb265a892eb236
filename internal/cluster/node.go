package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// NodePort is the port every node's API listens on (TLS), on its own
// address.
const NodePort = 7443

// NodeConfig is how a node's thawd is run.
type NodeConfig struct {
	Thawd   string   // the thawd binary
	Image   string   // guest image directory
	SnapBPF string   // eBPF capture program; "": thawd's default
	Accel   string   // "": tcg (no probe: it takes seconds under TCG)
	Args    []string // more thawd flags for every node (a backend's own settings: --shim)
	// Log receives every node's thawd output, each line prefixed with the
	// node's name; nil: only the node's own log file (RunDir/thawd.log).
	Log io.Writer
}

// Node is one thawd in its network namespace.
type Node struct {
	Name    string
	Index   int // from 1
	NS      string
	IP      netip.Addr
	DataDir string // thawd --data-dir
	RunDir  string // certificate, key, Unix socket, log, pid file
	URL     string // https://IP:NodePort
	cmd     *exec.Cmd
	logf    *os.File
	exited  chan struct{}
	// what start needs to run the node again (Restart)
	cfg              NodeConfig
	cert, key, token string
	uidBase          uint32
}

// Socket is the node's Unix socket, for local administration without a
// token (from the host: the socket is a file, reachable from any
// namespace).
func (n *Node) Socket() string { return filepath.Join(n.RunDir, "thawd.sock") }

// PIDFile holds thawd's pid while it runs (thaw-cluster kill reads it).
func (n *Node) PIDFile() string { return filepath.Join(n.RunDir, "thawd.pid") }

// start runs thawd in the node's namespace. It enters only the network
// namespace (nsenter --net), not `ip netns exec`, which also remounts
// /sys for the namespace and so hides the cgroup file systems under
// /sys/fs/cgroup that thawd puts every VM in.
func (n *Node) start(cfg NodeConfig, certFile, keyFile, tokenFile string, uidBase uint32) error {
	n.cfg, n.cert, n.key, n.token, n.uidBase = cfg, certFile, keyFile, tokenFile, uidBase
	accel := cfg.Accel
	if accel == "" {
		accel = "tcg"
	}
	args := []string{"--net=/run/netns/" + n.NS, "--", cfg.Thawd,
		"--node-name", n.Name,
		"--listen", n.Socket(),
		"--listen", netip.AddrPortFrom(n.IP, NodePort).String(),
		"--tls-cert", certFile, "--tls-key", keyFile, "--token-file", tokenFile,
		"--allowed-host", n.Name, "--allowed-host", n.IP.String(),
		"--data-dir", n.DataDir, "--image", cfg.Image, "--accel", accel,
		"--vm-uid-base", strconv.FormatUint(uint64(uidBase), 10), "--vm-uid-count", strconv.Itoa(uidsPerNode),
		"--drain-delay", "1s",
	}
	if cfg.SnapBPF != "" {
		args = append(args, "--snapbpf-object", cfg.SnapBPF)
	}
	args = append(args, cfg.Args...)
	logf, err := os.OpenFile(filepath.Join(n.RunDir, "thawd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// The host's /etc/thaw/thawd.yaml is not the node's: an empty one.
	conf := filepath.Join(n.RunDir, "thawd.yaml")
	if err := os.WriteFile(conf, []byte("# settings are flags: see the command line in thawd.log\n"), 0o600); err != nil {
		return err
	}
	args = append(args, "--config", conf)
	cmd := exec.Command("nsenter", args...)
	var out io.Writer = logf
	if cfg.Log != nil {
		out = io.MultiWriter(logf, &prefixWriter{prefix: "[" + n.Name + "] ", w: cfg.Log})
	}
	cmd.Stdout, cmd.Stderr = out, out
	// A node dies with the process that runs the cluster (its VMMs die
	// with it: thawd starts them with the same signal).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	n.cmd, n.logf, n.exited = cmd, logf, make(chan struct{})
	_ = os.WriteFile(n.PIDFile(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	go func() {
		_ = cmd.Wait()
		logf.Close()
		os.Remove(n.PIDFile())
		close(n.exited)
	}()
	return nil
}

// uidsPerNode is each node's range of VMM user ids (thawd --vm-uid-count),
// so that no two nodes' VMMs share a user.
const uidsPerNode = 4096

// Running reports whether the node's thawd is alive.
func (n *Node) Running() bool {
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// waitHealthy polls GET /v1/health until it answers ok, the process
// exits, or ctx ends.
func (n *Node) waitHealthy(ctx context.Context, c *client.Client) error {
	for {
		h, err := c.Health(ctx)
		if err == nil && h.Status == "ok" {
			if h.Node != n.Name {
				return fmt.Errorf("%s: health names node %q", n.Name, h.Node)
			}
			return nil
		}
		select {
		case <-n.exited:
			return fmt.Errorf("%s: thawd exited before it served (see %s): %v", n.Name, filepath.Join(n.RunDir, "thawd.log"), err)
		case <-ctx.Done():
			return fmt.Errorf("%s: not healthy: %w (last: %v)", n.Name, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill is a crash: SIGKILL to thawd and to every process below it (its
// VMMs) at once, no draining. It waits until thawd is reaped.
func (n *Node) Kill() error {
	if !n.Running() {
		return nil
	}
	err := KillTree(n.cmd.Process.Pid)
	<-n.exited
	return err
}

// Stop is an orderly stop: SIGTERM (thawd drains, then stops its VMs),
// then Kill after timeout.
func (n *Node) Stop(timeout time.Duration) error {
	if !n.Running() {
		return nil
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
		return nil
	case <-time.After(timeout):
		return errors.Join(fmt.Errorf("%s did not stop within %s: killed", n.Name, timeout), n.Kill())
	}
}

// KillTree sends SIGKILL to pid and every process descended from it. The
// descendants are listed first, so none is missed by being reparented
// when its parent dies.
func KillTree(pid int) error {
	pids := append([]int{pid}, descendants(pid)...)
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// prefixWriter prefixes every line written to w (whole lines only when
// writers write whole lines, as loggers do).
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	var sb strings.Builder
	for _, l := range lines {
		if l != "" {
			sb.WriteString(p.prefix + l)
		}
	}
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// RegistryFetched reads the node's chunk cache counters from its metrics
// (over its Unix socket): compressed bytes and chunks fetched from the
// registry since thawd started.
func (n *Node) RegistryFetched(ctx context.Context) (bytes, chunks int64, err error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", n.Socket())
	}}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://thawd/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s metrics: %s", n.Name, resp.Status)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		var dst *int64
		switch name {
		case "thaw_registry_fetched_bytes_total":
			dst = &bytes
		case "thaw_registry_fetched_chunks_total":
			dst = &chunks
		}
		if !ok || dst == nil {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s metrics: %s: %w", n.Name, name, err)
		}
		*dst = int64(f)
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("%s metrics: no chunk cache counters (no registry configured?)", n.Name)
	}
	return bytes, chunks, nil
}
