package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/dirtest"
)

// versionedFunction writes a function directory whose handler answers
// its own mark, in a directory of t's own.
func versionedFunction(t *testing.T, mark string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fn")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("MARK = %q\n\n\ndef handle(event):\n    return {\"mark\": MARK}\n", mark)
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// markOf invokes ref and returns the handler's mark and the version that
// ran.
func markOf(t *testing.T, e *env, ref string) (string, *client.Invocation) {
	t.Helper()
	inv, err := e.c.InvokeFunction(ctxT(t), ref, ev(`{}`), client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("invoke %s: %v %+v", ref, err, inv)
	}
	var r struct{ Mark string }
	if err := json.Unmarshal(inv.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r.Mark, inv
}

func deploy(t *testing.T, e *env, name, dir string, req client.DeployRequest) *client.Deploy {
	t.Helper()
	d, err := e.c.DeployFromDir(ctxT(t), name, dir, req)
	if err != nil {
		t.Fatalf("deploy %s: %v", name, err)
	}
	return d
}

// One command from code to a running version; a second deploy makes
// version 2, which live runs; the same content again changes nothing; an
// alias splits traffic by weight; a rollback moves live back without
// booting anything; retention collects versions that are neither recent
// nor aliased.
func TestDeployVersionsAliasesRollback(t *testing.T) {
	parallel(t)
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.VersionKeep = 2 })
	ctx := ctxT(t)
	v1dir, v2dir := versionedFunction(t, "one"), versionedFunction(t, "two")

	d1 := deploy(t, e, "greet", v1dir, client.DeployRequest{})
	if d1.Version != 1 || !d1.Promoted || d1.Unchanged || len(d1.Snapshots) != 1 {
		t.Fatalf("first deploy: %+v", d1)
	}
	t.Logf("deploy 1: %+v", d1.Timing)
	if mark, inv := markOf(t, e, "greet"); mark != "one" || inv.Version != 1 || inv.Alias != "live" {
		t.Fatalf("greet ran %q (version %d, alias %q)", mark, inv.Version, inv.Alias)
	}
	if again := deploy(t, e, "greet", v1dir, client.DeployRequest{}); !again.Unchanged || again.Version != 1 {
		t.Fatalf("the same content again: %+v", again)
	}
	d2 := deploy(t, e, "greet", v2dir, client.DeployRequest{})
	if d2.Version != 2 || !d2.Promoted {
		t.Fatalf("second deploy: %+v", d2)
	}
	if mark, _ := markOf(t, e, "greet"); mark != "two" {
		t.Fatalf("live runs %q after the second deploy", mark)
	}
	if mark, inv := markOf(t, e, "greet:1"); mark != "one" || inv.Version != 1 || inv.Alias != "" {
		t.Fatalf("greet:1 ran %q (version %d)", mark, inv.Version)
	}
	if mark, _ := markOf(t, e, "greet:live"); mark != "two" {
		t.Fatalf("greet:live ran %q", mark)
	}

	t.Run("an alias splits invocations by weight", func(t *testing.T) { checkAliasSplit(t, e, ctx) })

	t.Run("rollback moves live back in under a second and boots nothing", func(t *testing.T) {
		before, _ := e.c.ListVMs(ctx)
		r, err := e.c.RollbackFunction(ctx, "greet", 0)
		if err != nil || r.From != 2 || r.To != 1 {
			t.Fatalf("rollback: %v %+v", err, r)
		}
		if r.MS >= 1000 {
			t.Errorf("rollback took %.0f ms", r.MS)
		}
		after, _ := e.c.ListVMs(ctx)
		if len(after) > len(before) {
			t.Errorf("rollback started VMs: %d before, %d after", len(before), len(after))
		}
		if mark, inv := markOf(t, e, "greet"); mark != "one" || inv.Version != 1 {
			t.Fatalf("after rollback greet ran %q (version %d)", mark, inv.Version)
		}
		t.Logf("rollback %d -> %d in %.1f ms", r.From, r.To, r.MS)
	})

	t.Run("retention collects versions that are neither recent nor aliased", func(t *testing.T) { checkRetention(t, e, ctx) })
}

// checkAliasSplit: an alias with two versions at weight 50 each splits
// invocations about evenly; weights not adding up to 100 and a version
// that does not exist are refused.
func checkAliasSplit(t *testing.T, e *env, ctx context.Context) {
	if _, err := e.c.SetAlias(ctx, "greet", "canary", []client.Route{{Version: 1, Weight: 50}, {Version: 2, Weight: 50}}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	count := map[int]int{}
	for range n {
		_, inv := markOf(t, e, "greet:canary")
		count[inv.Version]++
	}
	// Binomial(40, 0.5): 8 or fewer of either happens with probability
	// 2.4e-5, so a fair split passes and a one-sided one fails.
	if count[1] < 9 || count[2] < 9 || count[1]+count[2] != n {
		t.Fatalf("canary split %v over %d invocations, want about half each", count, n)
	}
	z := (float64(count[1]) - n/2) / math.Sqrt(n/4)
	t.Logf("canary 50/50: %v (z = %.2f)", count, z)
	if _, err := e.c.SetAlias(ctx, "greet", "canary", []client.Route{{Version: 1, Weight: 60}, {Version: 2, Weight: 50}}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("weights adding up to 110: %v", err)
	}
	if _, err := e.c.SetAlias(ctx, "greet", "canary", []client.Route{{Version: 9, Weight: 100}}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a version that does not exist: %v", err)
	}
}

// checkRetention: with the alias gone, two deploys without promotion
// leave the newest two versions and live's with snapshots and collect the
// other.
func checkRetention(t *testing.T, e *env, ctx context.Context) {
	if err := e.c.DeleteAlias(ctx, "greet", "canary"); err != nil {
		t.Fatal(err)
	}
	// live routes to 1; deploy 3 and 4 without promotion: the newest two
	// (3, 4) and live's (1) keep their snapshots, 2 is collected.
	for _, mark := range []string{"three", "four"} {
		deploy(t, e, "greet", versionedFunction(t, mark), client.DeployRequest{NoPromote: true})
	}
	vs, err := e.c.ListVersions(ctx, "greet")
	if err != nil || len(vs) != 4 {
		t.Fatalf("versions: %v %+v", err, vs)
	}
	for _, v := range vs {
		if want := v.Version == 2; v.Collected != want || (v.Snapshot == "") != want {
			t.Errorf("version %d: collected %v, snapshot %q", v.Version, v.Collected, v.Snapshot)
		}
	}
	if _, err := e.c.InvokeFunction(ctx, "greet:2", ev(`{}`), client.InvokeOptions{}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a collected version: %v", err)
	}
	if mark, _ := markOf(t, e, "greet:4"); mark != "four" {
		t.Fatalf("greet:4 ran %q", mark)
	}
	if mark, _ := markOf(t, e, "greet"); mark != "one" {
		t.Fatalf("a deploy without promotion moved live: %q", mark)
	}
}

// Two deploys of one function at once both publish, one after the other,
// in the order they came.
func TestConcurrentDeploys(t *testing.T) {
	parallel(t)
	e := startEnv(t, t.TempDir())
	dirs := []string{versionedFunction(t, "a"), versionedFunction(t, "b")}
	res, errs := atOnce(len(dirs), func(i int) (*client.Deploy, error) {
		if i == 1 {
			time.Sleep(300 * time.Millisecond) // the second comes second
		}
		return e.c.DeployFromDir(ctxT(t), "pair", dirs[i], client.DeployRequest{})
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("deploy %d: %v", i, err)
		}
	}
	if res[0].Version != 1 || res[1].Version != 2 {
		t.Fatalf("versions %d and %d, want 1 and 2 in order", res[0].Version, res[1].Version)
	}
	if mark, _ := markOf(t, e, "pair"); mark != "b" {
		t.Fatalf("live runs %q, want the later deploy's", mark)
	}
}

// kill -9 of thawd in the middle of a deploy (its VM booting, or its
// snapshot being written or written but the version not published): on restart no
// version, no snapshot and no code of that deploy is there, and the same
// deploy then publishes version 1.
func TestDeployKilledMidway(t *testing.T) {
	parallel(t)
	for _, phase := range []string{"boot", "snapshot"} {
		t.Run("during "+phase, func(t *testing.T) {
			dataDir := t.TempDir()
			d, err := startThawd(t, dataDir)
			if err != nil {
				t.Fatal(err)
			}
			c := client.New("unix:" + d.sock)
			ctx := ctxT(t)
			dir := versionedFunction(t, "crash")
			op, err := c.StartDeployFromDir(ctx, "crashy", dir, client.DeployRequest{})
			if err != nil {
				t.Fatal(err)
			}
			waitPhase(t, c, op.ID, phase)
			d.kill()

			d, err = startThawd(t, dataDir)
			if err != nil {
				t.Fatal(err)
			}
			c = client.New("unix:" + d.sock)
			for _, line := range strings.Split(d.out.String(), "\n") {
				if strings.Contains(line, "removed") {
					t.Logf("restart: %s", line)
				}
			}
			if fns, err := c.ListFunctions(ctx); err != nil || len(fns) != 0 {
				t.Fatalf("functions after the restart: %v %+v", err, fns)
			}
			if snaps, err := c.ListSnapshots(ctx, ""); err != nil || len(snaps) != 0 {
				t.Fatalf("snapshots after the restart: %v %+v", err, snaps)
			}
			for _, sub := range []string{"functions", "snapshots"} {
				if left := dirtest.Names(t, filepath.Join(dataDir, sub)); len(left) != 0 {
					t.Errorf("%s left in %s after the restart", left, sub)
				}
			}
			res, err := c.DeployFromDir(ctx, "crashy", dir, client.DeployRequest{})
			if err != nil || res.Version != 1 {
				t.Fatalf("deploy after the restart: %v %+v", err, res)
			}
			d.kill()
		})
	}
}

// waitPhase follows an operation until its phase starts with prefix (or
// it ends, which fails the test).
func waitPhase(t *testing.T, c *client.Client, id, prefix string) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		op, err := c.Operation(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if op.State != "running" {
			t.Fatalf("the operation ended before %q: %+v", prefix, op)
		}
		if strings.HasPrefix(op.Progress.Phase, prefix) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("operation %s never reached %q", id, prefix)
}
