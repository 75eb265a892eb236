package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/thawcache"
)

// NATSVersion is the nats-server release the cluster runs (built from its
// Go module by scripts/install-deps.sh, as MinIO is).
const NATSVersion = "v2.15.2"

// NATSConfig is a NATS cluster with JetStream the nodes share for their
// asynchronous invocations, endpoints and schedules (thawd --nats-url).
type NATSConfig struct {
	Binary  string // the nats-server binary
	Servers int    // 1 to 5; 3 keeps three replicas of everything
}

// DefaultNATS is where install-deps builds nats-server ($THAW_NATS
// overrides).
func DefaultNATS() string {
	if p := os.Getenv("THAW_NATS"); p != "" {
		return p
	}
	return thawcache.Path("nats", NATSVersion, "nats-server")
}

// NATSCluster is nats-server processes on the host's end of the cluster
// network, routed to each other.
type NATSCluster struct {
	URLs  []string // the clients' URLs, one per server
	procs []*exec.Cmd
	done  []chan struct{}
}

// URL is every server's URL, for thawd --nats-url.
func (n *NATSCluster) URL() string { return strings.Join(n.URLs, ",") }

// freePortOn is a free TCP port on addr.
func freePortOn(addr netip.Addr) (int, error) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startNATS runs cfg.Servers JetStream servers on the host's address of
// the cluster network, each with its store under dir, and waits until
// every one accepts clients.
func startNATS(ctx context.Context, cfg NATSConfig, host netip.Addr, dir string) (*NATSCluster, error) {
	if cfg.Servers < 1 || cfg.Servers > 5 {
		return nil, fmt.Errorf("cluster: %d NATS servers: want 1 to 5", cfg.Servers)
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("cluster: nats-server %s: %w (make deps builds it)", cfg.Binary, err)
	}
	clientPorts, routePorts := make([]int, cfg.Servers), make([]int, cfg.Servers)
	for i := range cfg.Servers {
		var err error
		if clientPorts[i], err = freePortOn(host); err == nil {
			routePorts[i], err = freePortOn(host)
		}
		if err != nil {
			return nil, err
		}
	}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://%s:%d", host, p))
	}
	n := &NATSCluster{}
	for i := range cfg.Servers {
		sd := filepath.Join(dir, fmt.Sprintf("nats-%d", i+1))
		if err := os.MkdirAll(sd, 0o700); err != nil {
			n.Close()
			return nil, err
		}
		logf, err := os.OpenFile(filepath.Join(sd, "nats-server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			n.Close()
			return nil, err
		}
		args := []string{"--name", fmt.Sprintf("nats-%d", i+1), "--addr", host.String(), "--port", strconv.Itoa(clientPorts[i]),
			"--jetstream", "--store_dir", sd}
		if cfg.Servers > 1 {
			args = append(args, "--cluster_name", "thaw", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		}
		cmd := exec.Command(cfg.Binary, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			n.Close()
			return nil, fmt.Errorf("cluster: start nats-server: %w", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
		n.procs, n.done = append(n.procs, cmd), append(n.done, done)
		n.URLs = append(n.URLs, fmt.Sprintf("nats://%s:%d", host, clientPorts[i]))
	}
	for _, u := range n.URLs {
		if err := waitTCP(ctx, strings.TrimPrefix(u, "nats://"), 30*time.Second); err != nil {
			n.Close()
			return nil, fmt.Errorf("cluster: nats-server %s: %w (logs in %s)", u, err, dir)
		}
	}
	return n, nil
}

// waitTCP waits until addr accepts connections.
func waitTCP(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Close stops every server.
func (n *NATSCluster) Close() {
	for i, p := range n.procs {
		if p.Process != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.done[i]:
			case <-time.After(5 * time.Second):
				_ = p.Process.Kill()
				<-n.done[i]
			}
		}
	}
	n.procs = nil
}
