package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/registry"
)

// Nodes pushing snapshots of one version at once each add theirs: the
// record is rewritten only over the one read, so none is lost. Another
// digest under the number is a conflict and changes nothing.
func TestPushVersionConcurrent(t *testing.T) { eachStore(t, testPushVersionConcurrent) }

func testPushVersionConcurrent(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	ctx := context.Background()
	const pushers = 6
	digest := strings.Repeat("a", 64)
	var wg sync.WaitGroup
	errs := make([]error, pushers)
	for i := range pushers {
		wg.Go(func() {
			rec := registry.FunctionRecord{Name: "hello", Digest: strings.Repeat("d", 64), MemoryMiB: 4, VCPUs: 1, LatestCreatedAt: time.Now().UTC()}
			vr := registry.VersionRecord{Number: 1, Digest: digest, Function: rec, Snapshots: []string{fmt.Sprintf("snap-%d", i)}}
			errs[i] = e.store.PushVersion(ctx, vr, []byte("code"))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	vr, err := e.store.GetVersion(ctx, "hello", 1)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(slices.Values(vr.Snapshots))
	var want []string
	for i := range pushers {
		want = append(want, fmt.Sprintf("snap-%d", i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("version 1 lists %q, want every pusher's %q", got, want)
	}
	other := registry.VersionRecord{Number: 1, Digest: strings.Repeat("b", 64), Snapshots: []string{"snap-x"},
		Function: registry.FunctionRecord{Name: "hello", Digest: strings.Repeat("d", 64), MemoryMiB: 4, VCPUs: 1}}
	if err := e.store.PushVersion(ctx, other, []byte("other code")); !errors.Is(err, registry.ErrVersionConflict) {
		t.Fatalf("another digest under version 1: %v, want ErrVersionConflict", err)
	}
	if n := e.count(t, "code/"); n != 1 {
		t.Fatalf("%d code archives after a refused version, want 1", n)
	}
}
