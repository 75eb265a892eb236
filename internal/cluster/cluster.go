package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// Config is a cluster on this host.
type Config struct {
	Nodes   int    // how many thawd nodes (1-200)
	Dir     string // state: CA, token, HAProxy's files, each node's directories
	HAProxy string // the haproxy binary; "": haproxy on PATH
	Listen  string // HAProxy's address for clients; "": a free port on 127.0.0.1
	Node    NodeConfig
	// Store, if set, runs an object store in the cluster that every node
	// uses as its snapshot registry.
	Store *StoreConfig
	// NATS, if set, runs a NATS cluster with JetStream that every node
	// shares for its triggers (asynchronous invocations, schedules,
	// endpoints: thawd --nats-url).
	NATS *NATSConfig
	// ClientOptions are added to every client the cluster hands out
	// (tests check answers against the API document this way).
	ClientOptions []client.Option
}

// Cluster is N nodes in their namespaces behind one HAProxy.
type Cluster struct {
	Dir       string
	Net       *Network
	CA        *CA
	TokenFile string // every node's API token (one for the cluster)
	Nodes     []*Node
	LB        *HAProxy
	Store     *ObjectStore // nil without Config.Store
	NATS      *NATSCluster // nil without Config.NATS
	// KeysFile lists every node's registry signing key, which every node
	// trusts (TrustedKeysFile; "" without a store).
	KeysFile string
	// LinkCheck is the store's link as measured at the start.
	LinkCheck *LinkCheck
	token     string
	opts      []client.Option
	log       *slog.Logger
}

// Start builds the network, a CA with a certificate per node, starts
// every node and waits until each is healthy, then starts HAProxy and
// waits until it sees every node up. On failure everything made so far is
// removed.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (c *Cluster, err error) {
	if cfg.Nodes < 1 || cfg.Nodes > 200 {
		return nil, fmt.Errorf("cluster: %d nodes: want 1 to 200", cfg.Nodes)
	}
	if cfg.Node.Thawd == "" || cfg.Node.Image == "" {
		return nil, errors.New("cluster: the thawd binary and the guest image are required")
	}
	if cfg.Store != nil {
		if err := cfg.Store.validate(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	c = &Cluster{Dir: cfg.Dir, log: log}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
			c = nil
		}
	}()
	if c.Net, err = NewNetwork(); err != nil {
		return c, err
	}
	if c.CA, err = NewCA(cfg.Dir, "thaw cluster "+c.Net.ID); err != nil {
		return c, err
	}
	if err = c.writeToken(); err != nil {
		return c, err
	}
	c.opts = append([]client.Option{client.WithToken(c.token), client.WithRootCAs(c.CA.Pool())}, cfg.ClientOptions...)
	node := cfg.Node
	if cfg.Store != nil {
		if err = c.startStore(ctx, *cfg.Store); err != nil {
			return c, err
		}
		if c.LinkCheck, err = c.Store.CheckLink(ctx, linkCheckBytes); err != nil {
			return c, err
		}
		if err = WriteJSON(filepath.Join(c.Dir, "link.json"), c.LinkCheck); err != nil {
			return c, err
		}
		log.Info("object store up", "endpoint", c.Store.Config.Endpoint, "link", cfg.Store.Link.String(),
			"request_ms", c.LinkCheck.RTTMedianMS, "added_ms", c.LinkCheck.AddedMS, "get_mbit_s", int(c.LinkCheck.GetMbit), "put_mbit_s", int(c.LinkCheck.PutMbit))
		if c.KeysFile, err = c.provisionKeys(cfg.Nodes); err != nil {
			return c, err
		}
		node.Args = append([]string{"--registry-config", c.Store.ConfigFile, "--registry-trusted-keys", c.KeysFile}, node.Args...)
		if cfg.Store.PushOnPrepare {
			node.Args = append(node.Args, "--registry-push-on-prepare")
		}
	}
	if cfg.NATS != nil {
		if c.NATS, err = startNATS(ctx, *cfg.NATS, c.Net.HostIP, filepath.Join(cfg.Dir, "nats")); err != nil {
			return c, err
		}
		log.Info("nats cluster up", "servers", len(c.NATS.URLs), "url", c.NATS.URL())
		node.Args = append([]string{"--nats-url", c.NATS.URL(), "--nats-replicas", strconv.Itoa(min(cfg.NATS.Servers, 3))}, node.Args...)
	}
	for i := 1; i <= cfg.Nodes; i++ {
		if err = c.addNode(i, node); err != nil {
			return c, err
		}
	}
	for _, n := range c.Nodes {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = n.waitHealthy(wctx, c.NodeClient(n))
		cancel()
		if err != nil {
			return c, err
		}
	}
	return c, c.startLB(ctx, cfg)
}

// linkCheckBytes is the object the link check moves each way.
const linkCheckBytes = 32 << 20

func (c *Cluster) writeToken() error {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	c.token = hex.EncodeToString(b[:])
	c.TokenFile = filepath.Join(c.Dir, "token")
	return os.WriteFile(c.TokenFile, []byte(c.token+"\n"), 0o600)
}

// addNode makes node i's namespace, directories and certificate and
// starts its thawd.
func (c *Cluster) addNode(i int, cfg NodeConfig) error {
	ns, err := c.Net.AddNode(i)
	if err != nil {
		return err
	}
	name := nodeName(i)
	n := &Node{Name: name, Index: i, NS: ns, IP: c.Net.NodeIP(i), DataDir: nodeDataDir(c.Dir, i), RunDir: filepath.Join(nodeDir(c.Dir, i), "run")}
	n.URL = fmt.Sprintf("https://%s:%d", n.IP, NodePort)
	for _, d := range []string{n.DataDir, n.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	cert, key, err := c.CA.Issue(n.RunDir, name, n.IP)
	if err != nil {
		return err
	}
	// Past the default range, which a standalone thawd on this host uses.
	uidBase := daemon.DefaultVMUIDBase + daemon.DefaultVMUIDCount + uint32(i-1)*uidsPerNode
	if err := n.start(cfg, cert, key, c.TokenFile, uidBase); err != nil {
		return err
	}
	c.Nodes = append(c.Nodes, n)
	return nil
}

func (c *Cluster) startLB(ctx context.Context, cfg Config) error {
	listen := cfg.Listen
	if listen == "" {
		var err error
		if listen, err = freeLoopbackPort(); err != nil {
			return err
		}
	}
	lb := LBConfig{Listen: listen, CAFile: c.CA.CertFile, StatsSock: filepath.Join(c.Dir, "haproxy.sock")}
	for _, n := range c.Nodes {
		lb.Backends = append(lb.Backends, Backend{Name: n.Name, Addr: fmt.Sprintf("%s:%d", n.IP, NodePort)})
	}
	var err error
	if c.LB, err = StartHAProxy(ctx, cfg.HAProxy, c.Dir, lb); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.WaitStates(wctx, func(st map[string]string) bool {
		for _, n := range c.Nodes {
			if st[n.Name] != "UP" {
				return false
			}
		}
		return true
	})
}

// WaitStates polls HAProxy's view of the nodes until ok accepts it.
func (c *Cluster) WaitStates(ctx context.Context, ok func(map[string]string) bool) error {
	var last map[string]string
	var err error
	for {
		if last, err = c.LB.ServerStates(); err == nil && ok(last) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("haproxy's node states %v (%v): %w", last, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freeLoopbackPort() (string, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Token is the cluster's API token.
func (c *Cluster) Token() string { return c.token }

// URL is where clients reach the cluster: HAProxy.
func (c *Cluster) URL() string { return "http://" + c.LB.Addr }

// Client talks to the cluster through HAProxy.
func (c *Cluster) Client(opts ...client.Option) *client.Client {
	return client.New(c.URL(), append(append([]client.Option(nil), c.opts...), opts...)...)
}

// NodeClient talks to one node directly, over TLS.
func (c *Cluster) NodeClient(n *Node, opts ...client.Option) *client.Client {
	return client.New(n.URL, append(append([]client.Option(nil), c.opts...), opts...)...)
}

// Node is the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Close stops HAProxy, stops every node (SIGTERM; killed after 30 s) and
// removes the network. The state directory is left for the caller.
func (c *Cluster) Close() error {
	var errs []error
	if c.LB != nil {
		c.LB.Stop()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Stop(30 * time.Second); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if c.NATS != nil {
		c.NATS.Close()
	}
	if c.Store != nil {
		errs = append(errs, c.Store.Close())
	}
	if c.Net != nil {
		errs = append(errs, c.Net.Close())
	}
	return errors.Join(errs...)
}

// RestartNode stops node n (SIGTERM) and starts it again, with an empty
// data directory if wipe is set (no function, snapshot or chunk: a node
// that has never seen anything; it keeps its registry signing key, which
// the other nodes trust), and waits until it is healthy.
func (c *Cluster) RestartNode(ctx context.Context, n *Node, wipe bool) error {
	if err := n.Stop(30 * time.Second); err != nil {
		return err
	}
	if wipe {
		restoreKey, err := keepKey(n.DataDir)
		if err != nil {
			return err
		}
		if err := os.RemoveAll(n.DataDir); err != nil {
			return err
		}
		if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
			return err
		}
		if err := restoreKey(); err != nil {
			return err
		}
	}
	if err := n.start(n.cfg, n.cert, n.key, n.token, n.uidBase); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return n.waitHealthy(wctx, c.NodeClient(n))
}

// NodeOf reads the node that served an answer from its Thaw-Node header.
func NodeOf(h interface{ Get(string) string }) string { return h.Get(api.NodeHeader) }
