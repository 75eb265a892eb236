package vmm

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/problemtest"
	"github.com/thaw-dev/thaw/internal/vmend"
)

func validSpec() Spec {
	return Spec{
		ID: "vm-0123456789ab", RunDir: "/run/thaw/vm-0123456789ab", MemoryMiB: 256, VCPUs: 1,
		Accel: AccelTCG, Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img",
		Memory: Memory{Path: "/run/thaw/vm-0123456789ab/memory"},
		GenID:  NewGenID(),
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(s *Spec)
		want []string // one substring per expected problem; none for a valid spec
	}{
		{name: "valid", edit: func(*Spec) {}},
		{name: "valid at the minimums with KVM", edit: func(s *Spec) { s.MemoryMiB, s.VCPUs, s.Accel = 64, 1, AccelKVM }},
		{name: "memory below minimum", edit: func(s *Spec) { s.MemoryMiB = 63 }, want: []string{"memory 63 MiB is below the 64 MiB minimum"}},
		{name: "missing initrd only", edit: func(s *Spec) { s.Initrd = "" }, want: []string{"missing kernel or initrd"}},
		{name: "unknown accelerator", edit: func(s *Spec) { s.Accel = "hvf" }, want: []string{`unknown accelerator "hvf"`}},
		{name: "empty spec reports every problem at once", edit: func(s *Spec) { *s = Spec{} }, want: []string{
			"missing id",
			"missing run directory",
			"memory 0 MiB is below the 64 MiB minimum",
			"vcpus 0: need at least 1",
			`unknown accelerator ""`,
			"missing kernel or initrd",
			"missing memory file",
			"not a UUID",
		}},
		{name: "valid uffd backing", edit: func(s *Spec) { s.Memory.Backing = Backing{Kind: BackedByUffd, UffdSocket: "/r/uffd.sock"} }},
		{name: "valid layout", edit: func(s *Spec) { s.Memory.Backing = Backing{Kind: BackedByLayout, Layout: validLayout()} }},
		{name: "uffd without a socket", edit: func(s *Spec) { s.Memory.Backing.Kind = BackedByUffd },
			want: []string{"userfaultfd-backed memory needs a socket"}},
		{name: "uffd on a shared mapping", edit: func(s *Spec) {
			s.Memory.Shared, s.Memory.Backing = true, Backing{Kind: BackedByUffd, UffdSocket: "/r/uffd.sock"}
		}, want: []string{"needs a socket and a private mapping"}},
		{name: "file backing naming a layout", edit: func(s *Spec) { s.Memory.Backing.Layout = validLayout() },
			want: []string{"names a userfaultfd socket or a layout"}},
		{name: "layout backing without a layout", edit: func(s *Spec) { s.Memory.Backing.Kind = BackedByLayout },
			want: []string{"layout-backed memory without a layout"}},
		{name: "layout of another size", edit: func(s *Spec) {
			l := validLayout()
			l.Size, l.Ranges = 128<<20, nil
			s.Memory.Backing = Backing{Kind: BackedByLayout, Layout: l}
		}, want: []string{"layout of 134217728 bytes for guest memory of 268435456"}},
		{name: "unknown backing", edit: func(s *Spec) { s.Memory.Backing.Kind = 7 }, want: []string{"unknown memory backing backing(7)"}},
		{name: "punching freed pages of a file not kept", edit: func(s *Spec) { s.Memory.File.PunchFreed = true },
			want: []string{"punching freed pages is a setting of a memory file kept intact"}},
		{name: "several problems", edit: func(s *Spec) { s.ID, s.VCPUs, s.Memory.Path = "", -1, "" }, want: []string{
			"missing id", "vcpus -1: need at least 1", "missing memory file",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.edit(&s)
			problemtest.Check(t, s.Validate(), tt.want)
		})
	}
}

func TestParseAccel(t *testing.T) {
	tests := []struct {
		in      string
		want    Accel
		wantErr bool
	}{
		{in: "kvm", want: AccelKVM},
		{in: "tcg", want: AccelTCG},
		{in: "auto", wantErr: true},
		{in: "KVM", wantErr: true},
		{in: "", wantErr: true},
		{in: "kvm ", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAccel(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseAccel(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "want kvm or tcg") {
				t.Errorf("error %q does not list the accelerators", err)
			}
		})
	}
}

func validLayout() *Layout {
	return &Layout{Size: 256 << 20, LoadingSet: "/s/ls", Device: "/dev/dax0.0", Populate: true, Stats: "/r/stats", Ranges: []Range{
		{GuestOff: 0, Length: 1 << 20, FileOff: 0, Source: SourceMemoryFile},
		{GuestOff: 1 << 20, Length: 8192, FileOff: 4096, Source: SourceLoadingSet},
		{GuestOff: 2 << 20, Length: 4096, Source: SourceZero},
		{GuestOff: 4 << 20, Length: 4 << 20, FileOff: 8 << 20, Source: SourceDevice},
	}}
}

// A layout's ranges must fit the shim's and any backend's rules: each
// problem alone fails validation with ErrBadLayout.
func TestLayoutValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(l *Layout)
		want string
	}{
		{"size not a page multiple", func(l *Layout) { l.Size = 4097 }, "size 4097 is not a positive multiple of 4096"},
		{"no size", func(l *Layout) { l.Size = 0 }, "size 0 is not"},
		{"misaligned guest offset", func(l *Layout) { l.Ranges[0].GuestOff = 512 }, "range 0 is not page-aligned"},
		{"misaligned file offset", func(l *Layout) { l.Ranges[1].FileOff = 100 }, "range 1 is not page-aligned"},
		{"empty range", func(l *Layout) { l.Ranges[2].Length = 0 }, "range 2 [2097152,+0) is empty or outside"},
		{"past the end", func(l *Layout) { l.Ranges[3].GuestOff = 254 << 20 }, "range 3 [266338304,+4194304) is empty or outside"},
		{"unknown source", func(l *Layout) { l.Ranges[0].Source = 9 }, "range 0 has source 9"},
		{"zero range with a file offset", func(l *Layout) { l.Ranges[2].FileOff = 4096 }, "zero range 2 has file offset 4096"},
		{"loading set unnamed", func(l *Layout) { l.LoadingSet = "" }, "range 1 maps a file the layout does not name"},
		{"device unnamed", func(l *Layout) { l.Device = "" }, "range 3 maps a file the layout does not name"},
		{"file offset overflow", func(l *Layout) { l.Ranges[0].FileOff = 1<<63 - 4096 }, "range 0 file range overflows"},
		{"stats without populate", func(l *Layout) { l.Populate = false }, "populate statistics without populating"},
	}
	if err := validLayout().Validate(); err != nil {
		t.Fatalf("valid layout: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := validLayout()
			tt.edit(l)
			err := l.Validate()
			if !errors.Is(err, ErrBadLayout) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want ErrBadLayout with %q", err, tt.want)
			}
		})
	}
}

// ExitOf carries the facts and their classification.
func TestExitOf(t *testing.T) {
	for _, f := range []vmend.Facts{
		{ExitCode: 3, Started: true},
		{ExitCode: -1, Started: true, Requested: true, Signal: syscall.SIGKILL},
	} {
		before := time.Now()
		e := ExitOf(f)
		end := vmend.Classify(f)
		if e.Code != f.ExitCode || e.Requested != f.Requested || e.End != end || e.Reason != end.String() || e.Facts.Signal != f.Signal || e.At.Before(before) {
			t.Errorf("ExitOf(%+v) = %+v, want the facts classified as %v", f, e, end)
		}
	}
}
