package regsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/wire"
)

// ListRegistrySnapshots lists the snapshots in the registry, newest first.
func (s *Sync) ListRegistrySnapshots(ctx context.Context) ([]wire.RegistrySnapshot, error) {
	if err := s.NeedRegistry(); err != nil {
		return nil, err
	}
	rs, err := s.registry.ListSnapshots(ctx)
	if err != nil {
		return nil, Err(err)
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
func (s *Sync) DeleteRegistrySnapshot(ctx context.Context, id string) error {
	if err := s.d.CheckSnapshotID(id); err != nil {
		return err
	}
	if err := s.NeedRegistry(); err != nil {
		return err
	}
	if err := s.registry.DeleteSnapshot(ctx, id); err != nil {
		return Err(err)
	}
	s.log.Info("registry snapshot deleted", "snapshot", id)
	return nil
}

// CheckGC checks a collection request and makes its options.
func CheckGC(req wire.GCRequest) (registry.GCOptions, error) {
	opts := registry.GCOptions{Grace: DefaultGCGrace, DryRun: req.DryRun}
	if req.GraceS != nil {
		if *req.GraceS < 0 {
			return opts, fmt.Errorf("%w: grace_s %d: give 0 or more seconds", errdefs.ErrInvalid, *req.GraceS)
		}
		opts.Grace = time.Duration(*req.GraceS) * time.Second
	}
	return opts, nil
}

// CollectRegistry deletes the registry's chunks and code archives that no
// snapshot or function names and that are older than the grace.
func (s *Sync) CollectRegistry(ctx context.Context, req wire.GCRequest) (*wire.GCResult, error) {
	if err := s.NeedRegistry(); err != nil {
		return nil, err
	}
	opts, err := CheckGC(req)
	if err != nil {
		return nil, err
	}
	return s.collect(ctx, opts)
}

// collect runs one registry collection and counts it.
func (s *Sync) collect(ctx context.Context, opts registry.GCOptions) (*wire.GCResult, error) {
	s.phase(ctx, "collecting")
	t0 := time.Now()
	st, err := s.registry.GC(ctx, opts)
	switch {
	case errors.Is(err, registry.ErrBusy):
		s.d.Metrics.RegistryGC("busy", 0)
	case err != nil:
		s.d.Metrics.RegistryGC("failed", 0)
	case st.DryRun:
		s.d.Metrics.RegistryGC("dry_run", 0)
	default:
		s.d.Metrics.RegistryGC("ok", st.BytesDeleted)
	}
	if err != nil {
		return nil, Err(err)
	}
	res := &wire.GCResult{Snapshots: st.Snapshots, Functions: st.Functions, Chunks: st.Chunks,
		ChunksDeleted: st.ChunksDeleted, ChunksYoung: st.ChunksYoung, CodeDeleted: st.CodeDeleted,
		StaleLeases: st.StaleLeases, BytesDeleted: st.BytesDeleted, BytesKept: st.BytesKept, DryRun: st.DryRun,
		WaitedMS: ms(st.Waited), GCMS: ms(time.Since(t0))}
	s.log.Info("registry collected", "chunks", st.Chunks, "chunks_deleted", st.ChunksDeleted,
		"bytes_deleted", st.BytesDeleted, "dry_run", st.DryRun, "gc_ms", res.GCMS)
	return res, nil
}

// CollectScheduled is one scheduled registry collection (every
// --registry-gc-every). Collections from several nodes are safe (each
// deletes only what no manifest names), just redundant; one that a
// running push holds off (ErrBusy) is tried at the next tick.
func (s *Sync) CollectScheduled(ctx context.Context) {
	grace := s.cfg.GCGrace
	if grace == 0 {
		grace = DefaultGCGrace
	}
	_, err := s.collect(ctx, registry.GCOptions{Grace: grace}) // logs what it did
	switch {
	case err == nil:
	case errors.Is(err, errdefs.ErrConflict) || errors.Is(err, context.Canceled):
		s.log.Info("scheduled registry collection skipped", "err", err)
	default:
		s.log.Warn("scheduled registry collection failed", "err", err)
	}
}
