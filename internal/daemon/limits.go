package daemon

import (
	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/daemon/config"
	"github.com/thaw-dev/thaw/internal/daemon/invoke"
	"github.com/thaw-dev/thaw/wire"
)

// MaxInvokeTimeout is the longest timeout an invocation may ask for.
const MaxInvokeTimeout = invoke.MaxTimeout

// limits are the daemon's defaults and bounds in force (GET /v1/info's
// limits): its configuration after the defaults were filled in.
func (s *Service) limits() wire.Limits {
	c := s.cfg
	return wire.Limits{
		InvokeTimeoutMS: c.InvokeTimeout.Milliseconds(), MaxInvokeTimeoutMS: MaxInvokeTimeout.Milliseconds(),
		BootTimeoutMS: c.BootTimeout.Milliseconds(),
		MaxEventBytes: MaxEventBytes, MaxResultBytes: agent.MaxResult, MaxStoredResultBytes: int64(c.MaxStoredResultBytes),
		MaxCodeBytes:     MaxCodeBytes,
		DefaultMemoryMiB: c.DefaultMemoryMiB, DefaultVCPUs: c.DefaultVCPUs,
		MaxVMs: c.MaxVMs, VMMemoryBudgetMiB: c.VMMemoryBudgetMiB, VMMemoryOverheadMiB: c.VMMemoryOverheadMiB,
		AdmissionQueue: c.AdmissionQueue, AdmissionTimeoutMS: c.AdmissionTimeout.Milliseconds(),
		KeepAliveS: c.KeepAlive.Seconds(), KeepAliveMaxIdle: c.KeepAliveMaxIdle, KeepAliveMinAvailableMiB: max(c.KeepAliveMinAvailableMiB, 0),
		VMMPool: c.VMMPool, VMMPoolTTLS: c.VMMPoolTTL.Seconds(), VMMPoolMemoryMiB: c.VMMPoolMemoryMiB,
		HistoryMax: max(c.HistoryMax, 0), HistoryMaxAgeS: max(c.HistoryMaxAge, 0).Seconds(),
		VersionKeep: s.versions.Keep(), SnapshotKeep: c.SnapshotKeep,
		ConsoleLogBytes: c.ConsoleLogLimit,
		MaxLogBytes:     int64(c.MaxLogBytes), HistoryMaxLogBytes: max(c.HistoryMaxLogBytes, 0),
	}
}

// HostMemoryMiB is the host's memory, which the computed bounds are
// fractions of.
func HostMemoryMiB() int { return config.HostMemoryMiB() }
