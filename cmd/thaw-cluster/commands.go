package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/internal/cluster"
	"github.com/thaw-dev/thaw/internal/termtext"
)

// envFile is what `up` writes for scripts once the cluster serves.
const envFile = "cluster.env"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{Use: "thaw-cluster", Short: "A thaw cluster on this host: thawd nodes in network namespaces behind HAProxy",
		SilenceUsage: true, SilenceErrors: true}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(upCmd(stdout, stderr), killCmd(), statusCmd(stdout), sweepCmd(stdout), benchCmd(stdout, stderr))
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "thaw-cluster: %s\n", termtext.Inline(err.Error()))
		return 1
	}
	return 0
}

func upCmd(stdout, stderr io.Writer) *cobra.Command {
	var cfg cluster.Config
	var quiet, withStore bool
	store := cluster.StoreConfig{Link: cluster.DefaultLink}
	nats := cluster.NATSConfig{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start N nodes and HAProxy, write DIR/" + envFile + ", and run until SIGINT or SIGTERM, then remove everything",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Dir == "" {
				return errors.New("--dir is required")
			}
			if !quiet {
				cfg.Node.Log = stderr
			}
			if cfg.Node.Thawd == "" {
				cfg.Node.Thawd = besideSelf("thawd")
			}
			if withStore {
				cfg.Store = &store
			}
			if nats.Servers > 0 {
				cfg.NATS = &nats
			}
			log := slog.New(slog.NewTextHandler(stderr, nil))
			c, err := cluster.Start(cmd.Context(), cfg, log)
			if err != nil {
				return err
			}
			err = writeEnv(c)
			if err == nil {
				fmt.Fprintf(stdout, "cluster up: %d nodes behind %s (environment in %s)\n", len(c.Nodes), c.URL(), filepath.Join(cfg.Dir, envFile))
				<-cmd.Context().Done()
			}
			return errors.Join(err, c.Close())
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", 2, "how many thawd nodes")
	f.StringVar(&cfg.Dir, "dir", "", "state directory (CA, token, HAProxy, each node's data and run directories)")
	f.StringVar(&cfg.Listen, "listen", "", "HAProxy's address for clients (default: a free port on 127.0.0.1)")
	f.StringVar(&cfg.HAProxy, "haproxy", "haproxy", "the haproxy binary")
	f.StringVar(&cfg.Node.Thawd, "thawd", "", "the thawd binary (default: beside thaw-cluster)")
	f.StringVar(&cfg.Node.Image, "image", os.Getenv("THAW_IMAGE"), "guest image directory (default $THAW_IMAGE)")
	f.StringVar(&cfg.Node.Accel, "accel", "tcg", "accelerator of every node")
	f.StringArrayVar(&cfg.Node.Args, "thawd-arg", nil, "more thawd flags for every node, repeatable (--thawd-arg=--memory=256)")
	f.BoolVar(&withStore, "store", true, "run an object store (MinIO) in the cluster as every node's snapshot registry")
	f.StringVar(&store.MinIO, "minio", cluster.DefaultMinIO(), "the minio binary")
	f.DurationVar(&store.Link.RTT, "store-rtt", cluster.DefaultLink.RTT, "round trip added between the nodes and the store (a delay line in the store's namespace)")
	f.IntVar(&store.Link.RateMbit, "store-rate", cluster.DefaultLink.RateMbit, "rate limit of the store's link in each direction, Mbit/s (0: none)")
	f.IntVar(&store.ChunkSize, "chunk-size", 0, "chunk size of pushed snapshots, bytes (0: the registry's default)")
	f.BoolVar(&store.PushOnPrepare, "push-on-prepare", true, "nodes push every prepared snapshot to the store")
	f.IntVar(&nats.Servers, "nats", 3, "NATS servers (with JetStream) the nodes share for asynchronous invocations, schedules and endpoints (0: none; each node embeds its own)")
	f.StringVar(&nats.Binary, "nats-server", cluster.DefaultNATS(), "the nats-server binary")
	f.BoolVar(&quiet, "quiet", false, "do not copy the nodes' logs to stderr (they are in DIR/node-N/run/thawd.log)")
	return cmd
}

// besideSelf is name in the directory of this binary.
func besideSelf(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	return filepath.Join(filepath.Dir(exe), name)
}

// writeEnv writes shell assignments for scripts: the balancer, the token,
// the CA, the host's address on the cluster network, and per node its
// URL and Unix socket.
func writeEnv(c *cluster.Cluster) error {
	var b strings.Builder
	put := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, strconv.Quote(v)) }
	put("THAW_URL", c.URL())
	put("THAW_TOKEN_FILE", c.TokenFile)
	put("THAW_CACERT", c.CA.CertFile)
	put("CLUSTER_HOST_IP", c.Net.HostIP.String())
	var names []string
	for _, n := range c.Nodes {
		names = append(names, n.Name)
		key := strings.ToUpper(strings.ReplaceAll(n.Name, "-", "_"))
		put(key+"_URL", n.URL)
		put(key+"_SOCKET", n.Socket())
	}
	put("CLUSTER_NODES", strings.Join(names, " "))
	if c.NATS != nil {
		put("NATS_URL", c.NATS.URL())
	}
	if c.Store != nil {
		put("STORE_ENDPOINT", c.Store.Config.Endpoint)
		put("REGISTRY_CONFIG", c.Store.ConfigFile)
		put("REGISTRY_TRUSTED_KEYS", c.KeysFile)
		put("STORE_LINK", c.Store.Link.String())
		put("STORE_RTT_MS", strconv.FormatFloat(c.LinkCheck.AddedMS, 'f', 2, 64))
		put("STORE_GET_MBIT", strconv.FormatFloat(c.LinkCheck.GetMbit, 'f', 0, 64))
	}
	tmp := filepath.Join(c.Dir, envFile+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.Dir, envFile)) // whole or absent: scripts wait for it
}

func killCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "kill NODE",
		Short: "Crash a node: SIGKILL its thawd and every process below it (its QEMUs), no draining",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if strings.ContainsAny(args[0], "/.") || args[0] == "" {
				return fmt.Errorf("node %q: want a node name such as node-1", args[0])
			}
			pidFile := filepath.Join(dir, args[0], "run", "thawd.pid")
			b, err := os.ReadFile(pidFile)
			if err != nil {
				return fmt.Errorf("node %s: not running (%w)", args[0], err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 1 {
				return fmt.Errorf("%s: not a pid", pidFile)
			}
			return cluster.KillTree(pid)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the cluster's state directory (thaw-cluster up --dir)")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func statusCmd(stdout io.Writer) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Each node's state as HAProxy's health checks see it",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			st, err := cluster.ServerStates(filepath.Join(dir, "haproxy.sock"))
			if err != nil {
				return err
			}
			names := make([]string, 0, len(st))
			for n := range st {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Fprintf(stdout, "%s\t%s\n", n, st[n])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the cluster's state directory (thaw-cluster up --dir)")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func sweepCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "sweep",
		Short: "Remove namespaces and bridges that clusters of dead processes left behind",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			removed, err := cluster.Sweep()
			for _, r := range removed {
				fmt.Fprintln(stdout, "removed", r)
			}
			return err
		},
	}
}
