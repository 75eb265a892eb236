package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func openTest(t *testing.T, path string) *DB {
	t.Helper()
	db, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newDB(t *testing.T) *DB {
	return openTest(t, filepath.Join(t.TempDir(), "catalog.db"))
}

// base is a fixed instant with a non-trivial fraction of a second.
var base = time.Date(2026, 11, 22, 3, 0, 0, 123456789, time.UTC)

func testFunction(name string) *Function {
	return &Function{Name: name, Digest: strings.Repeat("ab", 32), CodeDir: "/data/functions/" + name + "/code",
		Disk: "/data/functions/" + name + "/code.ext4", MemoryMiB: 256, VCPUs: 2, CreatedAt: base}
}

// putAndGet puts fns in db and reads the first back.
func putAndGet(t *testing.T, db *DB, fns ...*Function) *Function {
	t.Helper()
	ctx := context.Background()
	for _, f := range fns {
		if err := db.PutFunction(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.GetFunction(ctx, fns[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// sameTime compares instants and then the rest of two records with their
// time fields zeroed (times read back are UTC; written ones may not be).
func requireSame[T any](t *testing.T, what string, got, want *T, times func(*T) []*time.Time) {
	t.Helper()
	g, w := *got, *want
	gt, wt := times(&g), times(&w)
	for i := range gt {
		if !gt[i].Equal(*wt[i]) {
			t.Errorf("%s: time field %d = %v, want %v", what, i, *gt[i], *wt[i])
		}
		*gt[i], *wt[i] = time.Time{}, time.Time{}
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

func fnTimes(f *Function) []*time.Time    { return []*time.Time{&f.CreatedAt} }
func vmTimes(v *VM) []*time.Time          { return []*time.Time{&v.CreatedAt, &v.UpdatedAt} }
func snapTimes(s *Snapshot) []*time.Time  { return []*time.Time{&s.CreatedAt} }
func invTimes(i *Invocation) []*time.Time { return []*time.Time{&i.CreatedAt} }

func TestFunctions(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	if fs, err := db.ListFunctions(ctx); err != nil || len(fs) != 0 {
		t.Fatalf("ListFunctions on an empty catalog = %v, %v", fs, err)
	}
	hello := testFunction("hello")
	hello.CreatedAt = base.In(time.FixedZone("CET", 3600)) // stored as UTC, same instant
	for _, f := range []*Function{hello, testFunction("echo"), testFunction("zeta")} {
		if err := db.PutFunction(ctx, f); err != nil {
			t.Fatalf("PutFunction(%s): %v", f.Name, err)
		}
	}
	got, err := db.GetFunction(ctx, "hello")
	if err != nil {
		t.Fatalf("GetFunction: %v", err)
	}
	requireSame(t, "GetFunction(hello)", got, hello, fnTimes)

	dup := testFunction("hello")
	dup.Digest = strings.Repeat("cd", 32)
	if err := db.PutFunction(ctx, dup); !errors.Is(err, ErrExists) {
		t.Fatalf("PutFunction(duplicate) = %v, want ErrExists", err)
	}
	if got, _ := db.GetFunction(ctx, "hello"); got.Digest != hello.Digest {
		t.Fatalf("duplicate PutFunction replaced the record: digest %s", got.Digest)
	}

	list, err := db.ListFunctions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "echo,hello,zeta" {
		t.Fatalf("ListFunctions names = %v, want echo,hello,zeta (by name)", names)
	}

	if err := db.DeleteFunction(ctx, "hello"); err != nil {
		t.Fatalf("DeleteFunction: %v", err)
	}
	if _, err := db.GetFunction(ctx, "hello"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetFunction after delete = %v, want ErrNotFound", err)
	}
	if err := db.DeleteFunction(ctx, "hello"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second DeleteFunction = %v, want ErrNotFound", err)
	}
	// The name is free again.
	if err := db.PutFunction(ctx, testFunction("hello")); err != nil {
		t.Fatalf("PutFunction after delete: %v", err)
	}
}

func TestNotFound(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	tests := []struct {
		name string
		call func() error
	}{
		{"GetFunction", func() error { _, err := db.GetFunction(ctx, "nope"); return err }},
		{"DeleteFunction", func() error { return db.DeleteFunction(ctx, "nope") }},
		{"GetVM", func() error { _, err := db.GetVM(ctx, "vm-000000000000"); return err }},
		{"DeleteVM", func() error { return db.DeleteVM(ctx, "vm-000000000000") }},
		{"GetSnapshot", func() error { _, err := db.GetSnapshot(ctx, "snap-000000000000"); return err }},
		{"DeleteSnapshot", func() error { return db.DeleteSnapshot(ctx, "snap-000000000000") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s = %v, want ErrNotFound", tt.name, err)
			}
			if !strings.Contains(err.Error(), "000000000000") && !strings.Contains(err.Error(), "nope") {
				t.Errorf("error %q does not name the missing record", err)
			}
		})
	}
}

func TestVMs(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	vm := &VM{ID: "vm-0123456789ab", Function: "hello", State: StateBooting, PID: 4242,
		RunDir: "/data/run/vm-0123456789ab", Accel: "tcg", MemoryMiB: 256, CreatedAt: base}
	before := time.Now()
	if err := db.PutVM(ctx, vm); err != nil {
		t.Fatalf("PutVM: %v", err)
	}
	if vm.UpdatedAt.Before(before) {
		t.Errorf("PutVM did not set UpdatedAt: %v", vm.UpdatedAt)
	}
	got, err := db.GetVM(ctx, vm.ID)
	if err != nil {
		t.Fatalf("GetVM: %v", err)
	}
	requireSame(t, "GetVM", got, vm, vmTimes)

	// PutVM replaces: a state change is an upsert, not a second row.
	vm.State, vm.Reason, vm.PID, vm.BootMS = StateFailed, "qemu exited with status 1", 0, 1234.5
	vm.Snapshot, vm.Strategy = "snap-0123456789ab", "vanilla"
	if err := db.PutVM(ctx, vm); err != nil {
		t.Fatalf("PutVM(update): %v", err)
	}
	got, err = db.GetVM(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	requireSame(t, "GetVM after update", got, vm, vmTimes)
	if got.Live() {
		t.Errorf("failed VM reports Live")
	}

	second := &VM{ID: "vm-ba9876543210", Function: "echo", State: StateRunning, CreatedAt: base.Add(time.Second)}
	if err := db.PutVM(ctx, second); err != nil {
		t.Fatal(err)
	}
	list, err := db.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != vm.ID || list[1].ID != second.ID {
		t.Fatalf("ListVMs = %v, want oldest first", ids(list, func(v *VM) string { return v.ID }))
	}
	if err := db.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatalf("DeleteVM: %v", err)
	}
	if _, err := db.GetVM(ctx, vm.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetVM after delete = %v, want ErrNotFound", err)
	}
}

func TestVMLive(t *testing.T) {
	tests := []struct {
		state string
		live  bool
	}{
		{StateBooting, true}, {StateRunning, true}, {StatePaused, true},
		{StateFailed, false}, {StateStopped, false}, {"", false},
	}
	for _, tt := range tests {
		if got := (&VM{State: tt.state}).Live(); got != tt.live {
			t.Errorf("VM{State: %q}.Live() = %v, want %v", tt.state, got, tt.live)
		}
	}
}

func ids[T any](xs []T, id func(T) string) []string {
	var out []string
	for _, x := range xs {
		out = append(out, id(x))
	}
	return out
}

func TestSnapshots(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	snaps := []*Snapshot{
		{ID: "snap-000000000001", Function: "hello", SourceVM: "vm-000000000001", Dir: "/data/snapshots/snap-000000000001",
			MemoryMiB: 256, SizeBytes: 268435456 + 561234, DiskBytes: 104202240, Stamp: `{"ino":12,"size":268435456,"mtime_ns":1,"ctime_ns":2}`,
			CreateMS: 412.5, PauseMS: 401.25, CreatedAt: base},
		{ID: "snap-000000000002", Function: "echo", CreatedAt: base.Add(time.Second)},
		{ID: "snap-000000000003", Function: "hello", CreatedAt: base.Add(2 * time.Second)},
	}
	for _, s := range snaps {
		if err := db.PutSnapshot(ctx, s); err != nil {
			t.Fatalf("PutSnapshot(%s): %v", s.ID, err)
		}
	}
	got, err := db.GetSnapshot(ctx, snaps[0].ID)
	if err != nil {
		t.Fatalf("GetSnapshot: %v", err)
	}
	requireSame(t, "GetSnapshot", got, snaps[0], snapTimes)

	// PutSnapshot replaces (VerifySnapshot records a new stamp this way).
	snaps[0].Stamp = `{"ino":13}`
	if err := db.PutSnapshot(ctx, snaps[0]); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.GetSnapshot(ctx, snaps[0].ID); got.Stamp != `{"ino":13}` {
		t.Fatalf("stamp after replace = %q", got.Stamp)
	}

	tests := []struct {
		function string
		want     string
	}{
		{"", "snap-000000000001,snap-000000000002,snap-000000000003"},
		{"hello", "snap-000000000001,snap-000000000003"},
		{"echo", "snap-000000000002"},
		{"nobody", ""},
	}
	for _, tt := range tests {
		list, err := db.ListSnapshots(ctx, tt.function)
		if err != nil {
			t.Fatalf("ListSnapshots(%q): %v", tt.function, err)
		}
		if got := strings.Join(ids(list, func(s *Snapshot) string { return s.ID }), ","); got != tt.want {
			t.Errorf("ListSnapshots(%q) = %s, want %s", tt.function, got, tt.want)
		}
	}

	if err := db.DeleteSnapshot(ctx, snaps[0].ID); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if _, err := db.GetSnapshot(ctx, snaps[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetSnapshot after delete = %v, want ErrNotFound", err)
	}
}

func TestInvocations(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	var all []*Invocation
	for i := range 6 {
		fn := "hello"
		if i%3 == 2 {
			fn = "echo"
		}
		inv := &Invocation{ID: "inv-00000000000" + string(rune('0'+i)), Function: fn, VM: "vm-0123456789ab",
			Snapshot: "snap-0123456789ab", Strategy: "vanilla", OK: i%2 == 0,
			Detail:    json.RawMessage(`{"n":` + string(rune('0'+i)) + `,"result":{"a":[1,2]}}`),
			CreatedAt: base.Add(time.Duration(i) * time.Minute)}
		// Insert out of order: ListInvocations orders by time, not by rowid.
		all = append(all, inv)
	}
	for _, i := range []int{3, 0, 5, 1, 4, 2} {
		if err := db.PutInvocation(ctx, all[i]); err != nil {
			t.Fatalf("PutInvocation(%d): %v", i, err)
		}
	}
	if err := db.PutInvocation(ctx, all[0]); err == nil {
		t.Errorf("PutInvocation with a duplicate id succeeded")
	}

	tests := []struct {
		function string
		limit    int
		want     []int
	}{
		{"", 100, []int{5, 4, 3, 2, 1, 0}},
		{"", 2, []int{5, 4}},
		{"hello", 100, []int{4, 3, 1, 0}},
		{"hello", 3, []int{4, 3, 1}},
		{"echo", 1, []int{5}},
		{"nobody", 10, nil},
	}
	for _, tt := range tests {
		list, err := db.ListInvocations(ctx, tt.function, tt.limit, time.Time{}, "")
		if err != nil {
			t.Fatalf("ListInvocations(%q, %d): %v", tt.function, tt.limit, err)
		}
		if len(list) != len(tt.want) {
			t.Errorf("ListInvocations(%q, %d) = %v, want %d records", tt.function, tt.limit,
				ids(list, func(i *Invocation) string { return i.ID }), len(tt.want))
			continue
		}
		for k, i := range tt.want {
			requireSame(t, "invocation "+all[i].ID, list[k], all[i], invTimes)
		}
	}
}

func TestListInvocationsNewestFirstAcrossSubsecondTimestamps(t *testing.T) {
	// created_at is stored as RFC 3339 with trailing zeros of the fraction
	// trimmed and ordered as text, so "...:00Z" sorts after "...:00.5Z" and
	// ".1Z" after ".15Z": these invocations come back in the wrong order.
	ctx := context.Background()
	db := newDB(t)
	whole := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	times := []time.Time{
		whole,                                     // "03:00:00Z"
		whole.Add(100 * time.Millisecond),         // "03:00:00.1Z"
		whole.Add(150 * time.Millisecond),         // "03:00:00.15Z"
		whole.Add(500 * time.Millisecond),         // "03:00:00.5Z"
		whole.Add(time.Second),                    // "03:00:01Z"
		whole.Add(time.Second + time.Microsecond), // "03:00:01.000001Z"
	}
	for i, ts := range times {
		inv := &Invocation{ID: "inv-" + string(rune('a'+i)), Function: "hello", Detail: json.RawMessage(`{}`), CreatedAt: ts}
		if err := db.PutInvocation(ctx, inv); err != nil {
			t.Fatal(err)
		}
	}
	list, err := db.ListInvocations(ctx, "", 100, time.Time{}, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(list); i++ {
		if list[i].CreatedAt.After(list[i-1].CreatedAt) {
			t.Errorf("ListInvocations not newest first: %s (%s) listed after %s (%s)",
				list[i].ID, list[i].CreatedAt.Format(time.RFC3339Nano), list[i-1].ID, list[i-1].CreatedAt.Format(time.RFC3339Nano))
		}
	}
}

func TestSettings(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	if v, err := db.Setting(ctx, "accel-probe:6.1:7.2.22:abc"); err != nil || v != "" {
		t.Fatalf("unset Setting = %q, %v; want empty, nil", v, err)
	}
	for _, v := range []string{"kvm:kvm probe: guest booted in 812ms", "tcg:kvm probe failed: timeout", ""} {
		if err := db.SetSetting(ctx, "accel-probe:6.1:7.2.22:abc", v); err != nil {
			t.Fatalf("SetSetting: %v", err)
		}
		if got, err := db.Setting(ctx, "accel-probe:6.1:7.2.22:abc"); err != nil || got != v {
			t.Fatalf("Setting = %q, %v; want %q", got, err, v)
		}
	}
}

func TestDataSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fn := testFunction("hello")
	vm := &VM{ID: "vm-0123456789ab", Function: "hello", State: StateRunning, CreatedAt: base}
	sn := &Snapshot{ID: "snap-0123456789ab", Function: "hello", Stamp: `{"ino":1}`, CreatedAt: base}
	inv := &Invocation{ID: "inv-0123456789ab", Function: "hello", OK: true, Detail: json.RawMessage(`{"ok":true}`), CreatedAt: base}
	for _, err := range []error{
		db.PutFunction(ctx, fn), db.PutVM(ctx, vm), db.PutSnapshot(ctx, sn), db.PutInvocation(ctx, inv),
		db.SetSetting(ctx, "k", "v"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	db = openTest(t, path)
	gotFn, err := db.GetFunction(ctx, "hello")
	if err != nil {
		t.Fatalf("GetFunction after reopen: %v", err)
	}
	requireSame(t, "function after reopen", gotFn, fn, fnTimes)
	gotVM, err := db.GetVM(ctx, vm.ID)
	if err != nil {
		t.Fatalf("GetVM after reopen: %v", err)
	}
	requireSame(t, "vm after reopen", gotVM, vm, vmTimes)
	gotSn, err := db.GetSnapshot(ctx, sn.ID)
	if err != nil {
		t.Fatalf("GetSnapshot after reopen: %v", err)
	}
	requireSame(t, "snapshot after reopen", gotSn, sn, snapTimes)
	invs, err := db.ListInvocations(ctx, "hello", 10, time.Time{}, "")
	if err != nil || len(invs) != 1 {
		t.Fatalf("ListInvocations after reopen = %v, %v", invs, err)
	}
	requireSame(t, "invocation after reopen", invs[0], inv, invTimes)
	if v, err := db.Setting(ctx, "k"); err != nil || v != "v" {
		t.Fatalf("Setting after reopen = %q, %v", v, err)
	}
}

func TestOpenCreatesTheFileAtPath(t *testing.T) {
	tests := []struct {
		name string
		file string
	}{
		{name: "plain name", file: "catalog.db"},
		{name: "space in the path", file: "my data/catalog.db"},
		// Open builds a "file:" URI without escaping the path, so SQLite
		// reads '#' as the start of a fragment and '%xx' as an escape: such
		// a data directory puts the catalog in another file.
		{name: "hash in the path", file: "thaw#1/catalog.db"},
		{name: "percent in the path", file: "100%25/catalog.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, tt.file)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			db := openTest(t, path)
			if err := db.SetSetting(context.Background(), "k", "v"); err != nil {
				t.Fatalf("SetSetting: %v", err)
			}
			if _, err := os.Stat(path); err != nil {
				var found []string
				_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						found = append(found, strings.TrimPrefix(p, root))
					}
					return nil
				})
				t.Fatalf("catalog not at %s (%v); files under the data dir: %v", tt.file, err, found)
			}
		})
	}
}

func TestFunctionNetworkRoundTrip(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	f := testFunction("svc")
	f.Network = Network{Egress: "services", Services: []string{"127.0.0.1:6379", "10.1.2.3:5432"}}
	got := putAndGet(t, db, f)
	if got.Network.Egress != "services" || len(got.Network.Services) != 2 || got.Network.Services[1] != "10.1.2.3:5432" {
		t.Fatalf("network %+v", got.Network)
	}
	if err := db.PutFunction(ctx, f); !errors.Is(err, ErrExists) {
		t.Fatalf("a second insert of the name: %v", err)
	}
}

// A function's dependencies are stored with it; one without has none.
func TestFunctionDepsRoundTrip(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	d := &Deps{Requested: []string{"igraph>=0.10"}, Resolved: []string{"igraph==1.0.0 --hash=sha256:aa", "texttable==1.7.2 --hash=sha256:bb"},
		Layer: "31df", LayerSHA256: "5c77", LayerBytes: 9359360, Format: "erofs"}
	with := testFunction("pagerank")
	with.Deps = d
	got := putAndGet(t, db, with, testFunction("hello"))
	if got.Deps == nil || got.Deps.Layer != "31df" || got.Deps.LayerBytes != 9359360 || len(got.Deps.Resolved) != 2 ||
		got.Deps.Requested[0] != "igraph>=0.10" || got.Deps.Format != "erofs" {
		t.Fatalf("deps %+v", got.Deps)
	}
	if got, err := db.GetFunction(ctx, "hello"); err != nil || got.Deps != nil {
		t.Fatalf("a function without requirements: %+v %v", got, err)
	}
}

func TestPruneInvocations(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	now := time.Now()
	for i := range 10 {
		// inv-0 is the oldest: 10 days ago; inv-9 now.
		if err := db.PutInvocation(ctx, &Invocation{ID: fmt.Sprintf("inv-%d", i), Function: "f", Detail: json.RawMessage(`{}`),
			CreatedAt: now.Add(time.Duration(i-9) * 24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.PruneInvocations(ctx, 0, now.Add(-72*time.Hour)) // older than 3 days: inv-0..inv-5
	if err != nil || n != 6 {
		t.Fatalf("pruned by age: %d %v", n, err)
	}
	n, err = db.PruneInvocations(ctx, 2, time.Time{}) // keep the newest 2
	if err != nil || n != 2 {
		t.Fatalf("pruned by count: %d %v", n, err)
	}
	left, err := db.ListInvocations(ctx, "", 100, time.Time{}, "")
	if err != nil || len(left) != 2 || left[0].ID != "inv-9" || left[1].ID != "inv-8" {
		t.Fatalf("left %v %v", left, err)
	}
}

func TestFunctionConfigRoundTrip(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	f := testFunction("cfg")
	f.Env, f.Secrets = map[string]string{"GREETING": "héllo", "EMPTY": ""}, map[string]string{"DB_PASSWORD": "db"}
	got := putAndGet(t, db, f, testFunction("plain"))
	if len(got.Env) != 2 || got.Env["GREETING"] != "héllo" || got.Env["EMPTY"] != "" || got.Secrets["DB_PASSWORD"] != "db" {
		t.Fatalf("config %+v %+v", got.Env, got.Secrets)
	}
	if got, err := db.GetFunction(ctx, "plain"); err != nil || got.Env != nil || got.Secrets != nil {
		t.Fatalf("a function without config reads back %+v %+v (%v)", got.Env, got.Secrets, err)
	}
}
