package daemon

import (
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
)

// GET /v1/info's limits are the settings in force, the computed ones
// (max VMs, budgets) filled in and the turned-off ones 0.
func TestInfoLimits(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) {
		c.InvokeTimeout, c.AdmissionQueue, c.KeepAlive, c.HistoryMaxAge, c.VersionKeep = 7*time.Second, 3, -1, -1, 4
	})
	l := s.Info().Limits
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"invoke_timeout_ms", l.InvokeTimeoutMS, 7000},
		{"max_invoke_timeout_ms", l.MaxInvokeTimeoutMS, 3_600_000},
		{"boot_timeout_ms", l.BootTimeoutMS, 10_000},
		{"max_event_bytes", l.MaxEventBytes, MaxEventBytes},
		{"max_result_bytes", l.MaxResultBytes, agent.MaxResult},
		{"max_stored_result_bytes", l.MaxStoredResultBytes, DefaultMaxStoredResult},
		{"admission_queue", int64(l.AdmissionQueue), 3},
		{"admission_timeout_ms", l.AdmissionTimeoutMS, 30_000},
		{"keep_alive_s (off)", int64(l.KeepAliveS), 0},
		{"history_max_age_s (no bound)", int64(l.HistoryMaxAgeS), 0},
		{"history_max", int64(l.HistoryMax), 100_000},
		{"version_keep", int64(l.VersionKeep), 4},
		{"vmm_pool", int64(l.VMMPool), 1},
		{"vmm_pool_ttl_s", int64(l.VMMPoolTTLS), 300},
		{"default_memory_mib", int64(l.DefaultMemoryMiB), 128},
		{"max_log_bytes", l.MaxLogBytes, agent.DefaultMaxLogs},
		{"history_max_log_bytes", l.HistoryMaxLogBytes, DefaultHistoryMaxLogBytes},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if l.MaxVMs != s.cfg.MaxVMs || l.MaxVMs < 1 || l.VMMemoryBudgetMiB != s.cfg.VMMemoryBudgetMiB || l.VMMemoryBudgetMiB <= 0 ||
		l.VMMPoolMemoryMiB <= 0 || l.KeepAliveMinAvailableMiB < 512 {
		t.Errorf("computed limits not filled in: %+v", l)
	}
}
