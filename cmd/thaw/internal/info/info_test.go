package info

import (
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
)

// The accelerator probe's account is one line, however many QEMU wrote;
// -o json keeps all of it.
func TestAccelSummary(t *testing.T) {
	detail := "kvm probe: qemu failed: exit status 1 qemu-system-x86_64: ../accel/kvm/kvm-all.c:2345: kvm_init: Assertion `ret == 0' failed.\n" +
		"qemu-system-x86_64: error: failed to set MSR 0x10a to 0x0\nmore\nlines"
	got := accelSummary(client.AccelInfo{Accel: "tcg", Source: "probe", Detail: detail})
	if strings.Contains(got, "\n") || !strings.HasPrefix(got, "tcg (probe: kvm probe: qemu failed: exit status 1") ||
		!strings.HasSuffix(got, "(thaw -o json info shows all))") || len([]rune(got)) > 160 {
		t.Errorf("summary %q", got)
	}
	if got := accelSummary(client.AccelInfo{Accel: "kvm", Source: "probe", Detail: "guest booted in 812ms"}); got != "kvm (probe: guest booted in 812ms)" {
		t.Errorf("summary %q", got)
	}
	if got := accelSummary(client.AccelInfo{Accel: "tcg", Source: "config"}); got != "tcg (config)" {
		t.Errorf("summary %q", got)
	}
}

func TestFmtDuration(t *testing.T) {
	for ms, want := range map[int64]string{500: "500ms", 60_000: "1m0s", 86_400_000: "1 day", 30 * 86_400_000: "30 days", 90_000_000: "25h0m0s"} {
		if got := fmtDuration(ms); got != want {
			t.Errorf("fmtDuration(%d) = %q, want %q", ms, got, want)
		}
	}
}
