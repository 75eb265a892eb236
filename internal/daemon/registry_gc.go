package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/wire"
)

// DefaultGCGrace is how old an unreferenced registry object must be before
// a collection deletes it, unless the request says otherwise.
const DefaultGCGrace = time.Hour

// ListRegistrySnapshots lists the snapshots in the registry, newest first.
func (s *Service) ListRegistrySnapshots(ctx context.Context) ([]wire.RegistrySnapshot, error) {
	if err := s.needRegistry(); err != nil {
		return nil, err
	}
	rs, err := s.registry.ListSnapshots(ctx)
	if err != nil {
		return nil, registryErr(err)
	}
	out := make([]wire.RegistrySnapshot, len(rs))
	for i, r := range rs {
		stored, data := r.Bytes()
		out[i] = wire.RegistrySnapshot{ID: r.ID, Function: r.Function, CreatedAt: r.CreatedAt, PushedAt: r.PushedAt,
			Chunks: len(r.ChunkSums()), StoredBytes: stored, DataBytes: data, Latest: r.Latest, SignedBy: r.SignedBy}
		if r.Refused != nil {
			out[i].Refused = r.Refused.Detail
		}
	}
	return out, nil
}

// DeleteRegistrySnapshot removes a snapshot from the registry (its
// manifest; its chunks at the next collection). Local copies stay.
func (s *Service) DeleteRegistrySnapshot(ctx context.Context, id string) error {
	if err := validID("snapshot", id); err != nil {
		return err
	}
	if err := s.needRegistry(); err != nil {
		return err
	}
	if err := s.registry.DeleteSnapshot(ctx, id); err != nil {
		return registryErr(err)
	}
	s.log.Info("registry snapshot deleted", "snapshot", id)
	return nil
}

func checkGC(req wire.GCRequest) (registry.GCOptions, error) {
	opts := registry.GCOptions{Grace: DefaultGCGrace, DryRun: req.DryRun}
	if req.GraceS != nil {
		if *req.GraceS < 0 {
			return opts, fmt.Errorf("%w: grace_s %d: give 0 or more seconds", ErrInvalid, *req.GraceS)
		}
		opts.Grace = time.Duration(*req.GraceS) * time.Second
	}
	return opts, nil
}

// CollectRegistry deletes the registry's chunks and code archives that no
// snapshot or function names and that are older than the grace.
func (s *Service) CollectRegistry(ctx context.Context, req wire.GCRequest) (*wire.GCResult, error) {
	if err := s.needRegistry(); err != nil {
		return nil, err
	}
	opts, err := checkGC(req)
	if err != nil {
		return nil, err
	}
	return s.collect(ctx, opts)
}

// collect runs one registry collection and counts it.
func (s *Service) collect(ctx context.Context, opts registry.GCOptions) (*wire.GCResult, error) {
	phase(ctx, "collecting")
	t0 := time.Now()
	st, err := s.registry.GC(ctx, opts)
	switch {
	case errors.Is(err, registry.ErrBusy):
		s.metrics.RegistryGC("busy", 0)
	case err != nil:
		s.metrics.RegistryGC("failed", 0)
	case st.DryRun:
		s.metrics.RegistryGC("dry_run", 0)
	default:
		s.metrics.RegistryGC("ok", st.BytesDeleted)
	}
	if err != nil {
		return nil, registryErr(err)
	}
	res := &wire.GCResult{Snapshots: st.Snapshots, Functions: st.Functions, Chunks: st.Chunks,
		ChunksDeleted: st.ChunksDeleted, ChunksYoung: st.ChunksYoung, CodeDeleted: st.CodeDeleted,
		StaleLeases: st.StaleLeases, BytesDeleted: st.BytesDeleted, BytesKept: st.BytesKept, DryRun: st.DryRun,
		WaitedMS: ms(st.Waited), GCMS: ms(time.Since(t0))}
	s.log.Info("registry collected", "chunks", st.Chunks, "chunks_deleted", st.ChunksDeleted,
		"bytes_deleted", st.BytesDeleted, "dry_run", st.DryRun, "gc_ms", res.GCMS)
	return res, nil
}

// StartGC runs CollectRegistry as an operation.
func (s *Service) StartGC(ctx context.Context, req wire.GCRequest) (*Operation, error) {
	if err := s.needRegistry(); err != nil {
		return nil, err
	}
	if _, err := checkGC(req); err != nil {
		return nil, err
	}
	return s.startOperation(ctx, wire.OpGC, s.registry.Config().Location(), func(ctx context.Context) (*wire.OperationResult, error) {
		res, err := s.CollectRegistry(ctx, req)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{GC: res}, nil
	})
}

// collectScheduled is one scheduled registry collection (every
// --registry-gc-every). Collections from several nodes are safe (each
// deletes only what no manifest names), just redundant; one that a
// running push holds off (ErrBusy) is tried at the next tick.
func (s *Service) collectScheduled(ctx context.Context) {
	grace := s.cfg.RegistryGCGrace
	if grace == 0 {
		grace = DefaultGCGrace
	}
	_, err := s.collect(ctx, registry.GCOptions{Grace: grace}) // logs what it did
	switch {
	case err == nil:
	case errors.Is(err, ErrConflict) || errors.Is(err, context.Canceled):
		s.log.Info("scheduled registry collection skipped", "err", err)
	default:
		s.log.Warn("scheduled registry collection failed", "err", err)
	}
}
