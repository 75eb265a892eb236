package client

import "github.com/thaw-dev/thaw/wire"

// The API's documents, defined once in package wire (which the daemon
// serves); the names here are the client's.
type (
	Function         = wire.Function
	FunctionDeps     = wire.FunctionDeps
	Network          = wire.Network
	VM               = wire.VM
	Snapshot         = wire.Snapshot
	RestoreTiming    = wire.RestoreTiming
	Timing           = wire.Timing
	FunctionError    = wire.FunctionError
	Invocation       = wire.Invocation
	FaultTrace       = wire.FaultTrace
	StrategyStats    = wire.StrategyStats
	Process          = wire.ProcessCounters
	PrepareResult    = wire.PrepareResult
	PrepareTiming    = wire.PrepareTiming
	PreparedStrategy = wire.PreparedStrategy
	Measure          = wire.Measure
	StrategyDetails  = wire.StrategyDescription
	InvocationRecord = wire.InvocationRecord
	AccelInfo        = wire.AccelInfo
	VMMInfo          = wire.VMMInfo
	Limits           = wire.Limits
	ImageInfo        = wire.GuestImage
	Info             = wire.Info
	Health           = wire.Health
	StoreEntry       = wire.StoreEntry
	StoreInfo        = wire.StoreInfo
	SnapshotMemory   = wire.SnapshotMemory
	VMMemory         = wire.VMMemory
	Operation        = wire.Operation
	OperationResult  = wire.OperationResult
	OperationError   = wire.OperationError
	PushResult       = wire.PushResult
	PullResult       = wire.PullResult
	PullRequest      = wire.PullRequest
	RegistrySnapshot = wire.RegistrySnapshot
	GCRequest        = wire.GCRequest
	GCResult         = wire.GCResult
)

// Where a snapshot's memory is (Snapshot.Memory).
const (
	MemoryLocal  = wire.MemoryLocal
	MemoryRemote = wire.MemoryRemote
)
