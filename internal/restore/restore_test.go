package restore

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm"
)

func TestParseKind(t *testing.T) {
	tests := []struct {
		in      string
		want    Kind
		wantErr bool
	}{
		{in: "", want: Default},
		{in: "vanilla", want: Vanilla},
		{in: "Vanilla", wantErr: true},
		{in: " vanilla", wantErr: true},
		{in: "uffd", wantErr: true},
		{in: "warm", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseKind(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseKind(%q) = %q, want an error", tt.in, got)
				}
				if got != "" {
					t.Errorf("ParseKind(%q) returned kind %q with the error", tt.in, got)
				}
				// The message names the bad value and every known kind.
				if !strings.Contains(err.Error(), `"`+tt.in+`"`) {
					t.Errorf("error %q does not quote %q", err, tt.in)
				}
				for _, k := range Kinds() {
					if !strings.Contains(err.Error(), string(k)) {
						t.Errorf("error %q does not list kind %q", err, k)
					}
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseKind(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestDefaultIsAKnownKind(t *testing.T) {
	if Default != Vanilla {
		t.Fatalf("Default = %q, want vanilla", Default)
	}
	for _, k := range Kinds() {
		if got, err := ParseKind(string(k)); err != nil || got != k {
			t.Errorf("ParseKind(%q) = %q, %v", k, got, err)
		}
	}
}

func TestBeginVanilla(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "snapshots", "snap-2b90cd00dc32")
	snap := Snapshot{Dir: dir, Manifest: &snapshot.Manifest{ID: "snap-2b90cd00dc32"}}
	if got, want := snap.MemoryPath(), filepath.Join(dir, snapshot.MemoryFile); got != want {
		t.Fatalf("MemoryPath = %s, want %s", got, want)
	}

	s, err := Begin(ctx, Vanilla, snap, Env{RunDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Begin(vanilla): %v", err)
	}
	defer s.Close()
	if s.Kind() != Vanilla {
		t.Errorf("Kind = %q, want vanilla", s.Kind())
	}
	// The snapshot's memory file, mapped private (copy-on-write) and
	// protected from QEMU's discards: the file is never written, so many
	// VMs restore from it at once.
	want := vmm.Memory{Path: filepath.Join(dir, "memory"), Shared: false,
		File: vmm.FileUse{KeepIntact: true}}
	if mem := s.Memory(); mem != want {
		t.Fatalf("Memory = %+v, want %+v", mem, want)
	}
	if err := s.Started(ctx, 12345); err != nil {
		t.Errorf("Started: %v", err)
	}
	s.InvocationDone()
	if st := s.Stats(); !reflect.DeepEqual(st, Stats{}) {
		t.Errorf("Stats = %+v, want none for a plain vanilla restore", st)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestBeginUnknownKind(t *testing.T) {
	snap := Snapshot{Dir: t.TempDir()}
	for _, k := range []Kind{"", "uffd", "Vanilla"} {
		if s, err := Begin(context.Background(), k, snap, Env{}); err == nil {
			s.Close()
			t.Errorf("Begin(%q) succeeded, want an error", k)
		}
	}
}
