package vms

import (
	"context"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// What the restorer (package daemon/restorer) sees of a live VM: its
// restorer.VM methods.

// Lock locks Mu.
func (lv *Live) Lock() { lv.Mu.Lock() }

// Unlock unlocks Mu.
func (lv *Live) Unlock() { lv.Mu.Unlock() }

// VMID is the VM's id.
func (lv *Live) VMID() string { return lv.ID }

// Function is the configuration the VM runs.
func (lv *Live) Function() *catalog.Function { return lv.Fn }

// Machine is the VM's VMM process.
func (lv *Live) Machine() vmm.Machine { return lv.M }

// Session is the strategy session serving the VM's memory (nil: booted).
func (lv *Live) Session() restore.Session { return lv.Sess }

// Attach gives the VM the strategy session serving its memory and the
// session's time before the restore proper (reported apart).
func (lv *Live) Attach(sess restore.Session, untimed time.Duration) {
	lv.Sess, lv.Untimed = sess, untimed
}

// Resuming records the VMM's counters and tracepoint counters just before
// its vCPUs resume, and the daemon's when the restore began.
func (lv *Live) Resuming(counters procstat.Counters, trace, daemonTrace faulttrace.Counters) {
	lv.CountersAtResume, lv.TraceAtResume, lv.DaemonTraceStart = counters, trace, daemonTrace
}

// FailStrategy records why the strategy can no longer serve the VM's memory.
func (lv *Live) FailStrategy(why string) { lv.StrategyFailed.Store(&why) }

// StrategyFailure is why the strategy could no longer serve the VM's
// memory, nil if it still can.
func (lv *Live) StrategyFailure() *string { return lv.StrategyFailed.Load() }

// SetSecretDigests records the secrets a restore delivered (name -> digest).
func (lv *Live) SetSecretDigests(d map[string]string) { lv.SecretDigests = d }

// Renew sends the guest its renewal (agent.Conn.Renew).
func (lv *Live) Renew(ctx context.Context, rn agent.Renewal) (*agent.Reply, error) {
	return lv.Agent.Renew(ctx, rn)
}
