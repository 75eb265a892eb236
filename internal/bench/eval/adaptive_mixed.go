package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
)

// The mixed experiment: every function of Cases both local (its snapshot
// on the daemon's disk) and remote (pushed to the registry, its local
// snapshots deleted, so its first invocation imports it and every restore
// fetches its memory from the registry on demand), invoked in a shuffled
// mix, once per round, under each arm.

// Locations of the mixed experiment (AdaptiveSample.Phase).
const (
	mixedLocal  = "local"
	mixedRemote = "remote"
)

// DefaultMixedArms are the mixed experiment's arms: auto and the
// strategies that restore a snapshot lazily from the registry.
var DefaultMixedArms = []string{ArmAuto, "vanilla", "reap", "faasnap"}

// MixedConfig configures the mixed experiment.
type MixedConfig struct {
	Cases  []bench.FunctionCase `json:"cases"`
	Arms   []string             `json:"arms"`
	Rounds int                  `json:"rounds"`
	Seed   uint64               `json:"seed"`
	// ChunkCacheBudget is the daemon's chunk cache budget (bytes; 0: no
	// bound), as it said: a small one makes every remote restore fetch.
	ChunkCacheBudget int64                         `json:"chunk_cache_budget"`
	Sink             io.Writer                     `json:"-"`
	Say              func(format string, a ...any) `json:"-"`
}

// mixedJob is one function at one location: its copy under auto, and
// the copy every fixed arm invokes naming its strategy (a fixed arm needs
// no function of its own: only auto learns from a function's cold starts,
// and auto's copy sees none of the fixed arms').
type mixedJob struct {
	fc       bench.FunctionCase
	location string
}

func (j mixedJob) name(arm string) string {
	loc := "l"
	if j.location == mixedRemote {
		loc = "r"
	}
	if arm != ArmAuto {
		arm = "fixed"
	}
	return j.fc.Name + "-" + loc + "-" + arm
}

// RunMixed runs the mixed experiment against the daemon c, which needs a
// registry with import on.
func RunMixed(ctx context.Context, c *client.Client, cfg MixedConfig) (*AdaptiveResult, error) {
	if cfg.Rounds < 1 || len(cfg.Cases) == 0 || !slices.Contains(cfg.Arms, ArmAuto) {
		return nil, errors.New("mixed: give at least one round, the cases and the arms, auto among them")
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Registry == nil || !info.Registry.Import {
		return nil, errors.New("mixed: the daemon has no registry with import on (thawd --registry-config): remote restores need one")
	}
	cfg.ChunkCacheBudget = info.Registry.CacheBudgetBytes
	res := &AdaptiveResult{Experiment: "mixed", Machine: bench.DescribeMachine(info), When: time.Now().UTC(), Mixed: &cfg}
	var jobs []mixedJob
	for _, fc := range cfg.Cases {
		for _, loc := range []string{mixedLocal, mixedRemote} {
			j := mixedJob{fc: fc, location: loc}
			for _, arm := range []string{ArmAuto, "fixed"} {
				if err := setUpMixed(ctx, c, j, arm, cfg.Say); err != nil {
					return nil, err
				}
			}
			jobs = append(jobs, j)
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+1))
	n := len(jobs) * len(cfg.Arms)
	for round := 0; round < cfg.Rounds; round++ {
		for k, i := range rng.Perm(n) {
			j, arm := jobs[i/len(cfg.Arms)], cfg.Arms[i%len(cfg.Arms)]
			strategy := ""
			if arm != ArmAuto {
				strategy = arm
			}
			s, err := coldSampleWith(ctx, c, "mixed", arm, j.name(arm), strategy, round, j.location, j.fc.TestEvent)
			if err != nil {
				return nil, err
			}
			res.add(cfg.Sink, s)
			cfg.Say("round %d %3d/%d %-22s %-8s %-8s %-8s total %7.1f ms, fetched %s", round+1, k+1, n, j.name(arm), arm, s.Strategy, s.How,
				s.TotalMS, fmtMiBytes(s.FetchedBytes))
		}
	}
	return res, res.finish(ctx, c, "")
}

// setUpMixed creates and prepares a job's function for arm (auto, or the
// fixed arms' copy); a remote one is then pushed and its local snapshots
// deleted.
func setUpMixed(ctx context.Context, c *client.Client, j mixedJob, arm string, say func(string, ...any)) error {
	name := j.name(arm)
	opts := armOptions(ArmAuto)
	if arm != ArmAuto {
		opts = armOptions("vanilla") // requests name their strategy
	}
	if err := freshFunction(ctx, c, j.fc, name, opts...); err != nil {
		return err
	}
	say("%s: prepare", name)
	pr, err := c.Prepare(ctx, name, j.fc.RecordEvent, client.PrepareOptions{})
	if err != nil {
		return fmt.Errorf("prepare %s: %w", name, err)
	}
	if j.location == mixedLocal {
		return nil
	}
	if _, err := c.PushSnapshot(ctx, pr.Warm.ID); err != nil {
		return fmt.Errorf("push %s: %w", pr.Warm.ID, err)
	}
	snaps, err := c.ListSnapshots(ctx, name)
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if err := c.DeleteSnapshot(ctx, sn.ID); err != nil {
			return fmt.Errorf("delete %s's local snapshot %s: %w", name, sn.ID, err)
		}
	}
	// Its first invocation imports it (lazily): done here, not measured,
	// so every arm's samples are lazy restores alike.
	inv, err := c.InvokeFunction(ctx, name, j.fc.TestEvent, client.InvokeOptions{Strategy: "reap"})
	if err != nil {
		return fmt.Errorf("import %s: %w", name, err)
	}
	if inv.Timing.Restore == nil || inv.Timing.Restore.Source != "registry" {
		return fmt.Errorf("import %s: the restore did not come from the registry", name)
	}
	return nil
}
