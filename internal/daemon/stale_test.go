package daemon

import (
	"strings"
	"testing"
)

// A version is stale when what its snapshots were built from differs from
// what the daemon runs; the reason names each difference, and its metric
// label the first.
func TestStaleReasons(t *testing.T) {
	was := buildInputs{Image: "0123456789abcdef", Kernel: "k1", Rootfs: "r1", Initrd: "i1", Cmdline: "console=ttyS0",
		Machine: "pc-i440fx-7.2", VMM: "qemu 7.2.22", Accel: "tcg"}
	for _, tc := range []struct {
		name  string
		edit  func(*buildInputs)
		want  []string
		label string
	}{
		{"nothing", func(*buildInputs) {}, nil, ""},
		{"image", func(b *buildInputs) { b.Image, b.Rootfs = "fedcba9876543210", "r2" },
			[]string{"guest image changed (0123456789ab, now fedcba987654)"}, "image"},
		{"command line", func(b *buildInputs) { b.Cmdline = "quiet" }, []string{"guest image changed"}, "image"},
		{"kernel", func(b *buildInputs) { b.Kernel = "k2" }, []string{"kernel changed"}, "kernel"},
		{"accelerator", func(b *buildInputs) { b.Accel = "kvm" },
			[]string{"machine changed (qemu 7.2.22 pc-i440fx-7.2 tcg, now qemu 7.2.22 pc-i440fx-7.2 kvm)"}, "machine"},
		{"kernel and vmm", func(b *buildInputs) { b.Kernel, b.VMM = "k2", "qemu 8.2.0" },
			[]string{"kernel changed; machine changed (qemu 7.2.22"}, "kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := was
			tc.edit(&now)
			why := staleReasons(was, now)
			if (why == "") != (tc.want == nil) {
				t.Fatalf("reasons %q, want %q", why, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("reasons %q do not say %q", why, w)
				}
			}
			if why != "" && staleReasonLabel(why) != tc.label {
				t.Errorf("label of %q: %q, want %q", why, staleReasonLabel(why), tc.label)
			}
		})
	}
	if got := staleReasonLabel("function code changed"); got != "other" {
		t.Errorf("label of an unknown reason: %q", got)
	}
}
