package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/cluster"
)

// remoteBench is what thaw-cluster bench measures, and how, from its flags.
type remoteBench struct {
	cfg       cluster.Config
	store     cluster.StoreConfig
	out, root string
	functions []string
	lazy      []string
	reps      int
	rerender  bool
	keep      bool
}

func benchCmd(stdout, stderr io.Writer) *cobra.Command {
	b := &remoteBench{store: cluster.StoreConfig{Link: cluster.DefaultLink}}
	cmd := &cobra.Command{
		Use:   "bench --out DIR",
		Short: "Measure remote restore: a snapshot pushed by one node restored on a node that never saw it, over the emulated link",
		Long: `Start a cluster of two nodes and an object store behind the emulated link,
then per function: prepare and push it on node-1; per repetition, a cold
vanilla restore on node-1 from its disk (page cache evicted), and on node-2,
restarted with an empty data directory each time, the first invocation
(imported from the registry and restored lazily, per --lazy strategy) and a
full pull followed by a cold restore. Writes DIR/remote.jsonl (samples as
measured), DIR/remote.json, DIR/remote.md and DIR/link.json.`,
		Example: `  thaw-cluster bench --out docs/results/remote-restore-$(date +%Y%m%d) --image ~/.cache/thaw/images/current`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return b.run(cmd.Context(), stdout, stderr)
		},
	}
	b.define(cmd.Flags())
	return cmd
}

// define defines the bench's flags.
func (b *remoteBench) define(f *pflag.FlagSet) {
	f.StringVar(&b.out, "out", "", "results directory")
	f.StringVar(&b.root, "root", ".", "the repository (its functions/ directory)")
	f.StringSliceVar(&b.functions, "functions", []string{"hello", "json", "image"}, "functions to measure (of hello, json, image)")
	f.StringSliceVar(&b.lazy, "lazy", nil, "strategies restored lazily (default: every strategy the nodes restore lazily, as GET /v1/info describes them)")
	f.IntVar(&b.reps, "reps", 3, "repetitions")
	f.BoolVar(&b.keep, "keep", false, "keep the cluster's directory (the nodes' logs) after the run")
	f.BoolVar(&b.rerender, "report", false, "only write DIR/remote.md again from DIR/remote.json")
	f.StringVar(&b.cfg.Node.Thawd, "thawd", "", "the thawd binary (default: beside thaw-cluster)")
	f.StringVar(&b.cfg.Node.Image, "image", os.Getenv("THAW_IMAGE"), "guest image directory (default $THAW_IMAGE)")
	f.StringVar(&b.cfg.Node.Accel, "accel", "tcg", "accelerator of every node")
	f.StringArrayVar(&b.cfg.Node.Args, "thawd-arg", nil, "a further thawd flag for every node (repeatable), e.g. --thawd-arg=--lazy-readahead=2")
	f.StringVar(&b.store.MinIO, "minio", cluster.DefaultMinIO(), "the minio binary")
	f.DurationVar(&b.store.Link.RTT, "store-rtt", cluster.DefaultLink.RTT, "round trip added between the nodes and the store")
	f.IntVar(&b.store.Link.RateMbit, "store-rate", cluster.DefaultLink.RateMbit, "rate limit of the store's link in each direction, Mbit/s (0: none)")
	f.IntVar(&b.store.ChunkSize, "chunk-size", 0, "chunk size of pushed snapshots, bytes (0: the registry's default)")
}

// run checks the flags, starts the cluster in a temporary directory and
// measures; with --report it only renders the report again.
func (b *remoteBench) run(ctx context.Context, stdout, stderr io.Writer) error {
	if b.out == "" {
		return errors.New("--out is required")
	}
	if b.rerender {
		return rerenderRemote(b.out)
	}
	if b.reps < 1 {
		return fmt.Errorf("--reps %d: want at least 1", b.reps)
	}
	cases, err := pickCases(b.root, b.functions)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	if b.cfg.Node.Thawd == "" {
		b.cfg.Node.Thawd = besideSelf("thawd")
	}
	dir, err := os.MkdirTemp("", "thaw-cluster-bench-")
	if err != nil {
		return err
	}
	if b.keep {
		fmt.Fprintf(stderr, "keeping the cluster's directory (each node's log: NODE/run/thawd.log): %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	b.cfg.Nodes, b.cfg.Dir, b.cfg.Store = 2, dir, &b.store
	c, err := cluster.Start(ctx, b.cfg, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	res, err := runRemote(ctx, c, cases, b.lazy, b.reps, b.out, stderr)
	err = errors.Join(err, c.Close())
	if res != nil {
		err = errors.Join(err, writeRemote(b.out, res))
		fmt.Fprintf(stdout, "%s\n", filepath.Join(b.out, "remote.md"))
	}
	return err
}

// pickCases selects the named functions of bench.DefaultRemoteCases.
func pickCases(root string, names []string) ([]bench.FunctionCase, error) {
	all := bench.DefaultRemoteCases(root)
	var out []bench.FunctionCase
	for _, n := range names {
		found := false
		for _, fc := range all {
			if fc.Name == n {
				out, found = append(out, fc), true
			}
		}
		if !found {
			return nil, fmt.Errorf("--functions: %q is not one of hello, json, image", n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--functions: none given")
	}
	for _, fc := range out {
		if _, err := os.Stat(filepath.Join(fc.Dir, "handler.py")); err != nil {
			return nil, fmt.Errorf("--root %s: %w", root, err)
		}
	}
	return out, nil
}

// runRemote runs the experiment with node-1 as the owner and node-2 as
// the node restarted empty before each remote restore.
func runRemote(ctx context.Context, c *cluster.Cluster, cases []bench.FunctionCase, lazy []string, reps int, out string, stderr io.Writer) (*bench.RemoteResult, error) {
	if err := cluster.WriteJSON(filepath.Join(out, "link.json"), c.LinkCheck); err != nil {
		return nil, err
	}
	link, _ := json.Marshal(c.LinkCheck)
	sink, err := os.Create(filepath.Join(out, "remote.jsonl"))
	if err != nil {
		return nil, err
	}
	defer sink.Close()
	owner, fresh := c.Nodes[0], c.Nodes[1]
	if len(lazy) == 0 {
		if lazy, err = lazyStrategies(ctx, c.NodeClient(owner)); err != nil {
			return nil, err
		}
	}
	nodes := bench.RemoteNodes{
		Owner: c.NodeClient(owner),
		Fresh: func(ctx context.Context) (*client.Client, error) {
			if err := c.RestartNode(ctx, fresh, true); err != nil {
				return nil, err
			}
			return c.NodeClient(fresh), nil
		},
		Fetched: fresh.RegistryFetched,
	}
	cfg := bench.RemoteConfig{Cases: cases, Reps: reps, Lazy: lazy, Link: link, Timeout: 5 * time.Minute, Sink: sink,
		Say: func(format string, a ...any) {
			fmt.Fprintf(stderr, "%s %s\n", time.Now().UTC().Format("15:04:05"), strings.TrimSpace(fmt.Sprintf(format, a...)))
		}}
	return bench.RunRemote(ctx, nodes, cfg)
}

// lazyStrategies are the strategies a node restores lazily, in its order.
func lazyStrategies(ctx context.Context, c *client.Client) ([]string, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("strategies of the owner node: %w", err)
	}
	var out []string
	for _, d := range info.StrategyDetails {
		if d.Lazy {
			out = append(out, d.Kind)
		}
	}
	return out, nil
}

func writeRemote(out string, res *bench.RemoteResult) error {
	if err := cluster.WriteJSON(filepath.Join(out, "remote.json"), res); err != nil {
		return err
	}
	md := "# Remote restore: a snapshot from the registry on a node that never saw it\n\nGenerated by `thaw-cluster bench`. Raw samples: [remote.jsonl](remote.jsonl); everything: [remote.json](remote.json); the link: [link.json](link.json).\n\n" + res.Markdown()
	return os.WriteFile(filepath.Join(out, "remote.md"), []byte(md), 0o644)
}

// rerenderRemote writes out/remote.md from out/remote.json.
func rerenderRemote(out string) error {
	b, err := os.ReadFile(filepath.Join(out, "remote.json"))
	if err != nil {
		return err
	}
	var res bench.RemoteResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(out, "remote.json"), err)
	}
	return writeRemote(out, &res)
}
