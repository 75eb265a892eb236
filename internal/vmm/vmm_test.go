package vmm

import (
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/problemtest"
)

func validSpec() Spec {
	return Spec{
		ID: "vm-0123456789ab", RunDir: "/run/thaw/vm-0123456789ab", MemoryMiB: 256, VCPUs: 1,
		Accel: AccelTCG, Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img",
		Memory: Memory{Path: "/run/thaw/vm-0123456789ab/memory"}, Shim: "/usr/lib/thaw/libthaw_shim.so",
		GenID: NewGenID(),
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
			"missing interposer",
		}},
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

// The interposer's settings become exactly the variables docs/shim-layout.md
// names, and nothing for what is not set.
func TestInterposerEnv(t *testing.T) {
	got := strings.Join(Interposer{Mode: ModeLayout, MemFile: "/s/memory", Layout: "/r/layout", LSFile: "/s/ls",
		Device: "/dev/dax0.0", Populate: true, Stats: "/r/stats", Protect: true}.Env(), " ")
	want := "THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE=/s/memory THAW_SHIM_LAYOUT=/r/layout THAW_SHIM_LSFILE=/s/ls " +
		"THAW_SHIM_DEVICE=/dev/dax0.0 THAW_SHIM_POPULATE=read THAW_SHIM_STATS=/r/stats THAW_SHIM_PROTECT=1"
	if got != want {
		t.Errorf("layout env:\n got %s\nwant %s", got, want)
	}
	if got := strings.Join(Interposer{Mode: ModeUffd, MemFile: "/m", UffdSock: "/r/uffd.sock"}.Env(), " "); got != "THAW_SHIM_MODE=uffd THAW_SHIM_MEMFILE=/m THAW_SHIM_UFFD_SOCK=/r/uffd.sock" {
		t.Errorf("uffd env: %s", got)
	}
	if got := strings.Join(Interposer{MemFile: "/m", Protect: true, PassPunches: true, NoReadahead: true}.Env(), " "); got != "THAW_SHIM_MEMFILE=/m THAW_SHIM_PUNCH=pass THAW_SHIM_PROTECT=1 THAW_SHIM_READAHEAD=off" {
		t.Errorf("record env: %s", got)
	}
	if env := (Interposer{}).Env(); len(env) != 0 {
		t.Errorf("pass-through env: %v", env)
	}
}
