// The stage-ring drivers: the loops that stream a block's tiles global -> shared through a ring
// of `Stages` buffers with any mechanism of rings.cuh. Kernels (stream copy, stencils,
// reductions) are written once against these drivers; mechanism and stage count are template
// parameters of the ring.
//
//   load(writer, k)          issue the copies of the block's k-th tile: writer.copy(dst, src, n)
//                            for each segment (dst inside writer.stage)
//   consume(stage, k, team)  use the landed tile; team = {rank, size} of the consuming threads
//   ready()                  optional: the kernel's own set-up (a stencil's weights into shared
//                            memory), run once by every thread of a block that has tiles, after
//                            its first tile's copies are issued and before the first wait, so
//                            that the set-up's own memory latency overlaps them. It must end in
//                            a block-wide barrier if the consumers read what it writes.
//
// Unified (all threads produce and consume), Stages > 1:
//
//   prologue: produce tiles 0 .. Stages-2
//   for k:  consumer_wait(k) -> produce(k + Stages-1) -> consume(k) -> consumer_release(k)
//
// Producing *after* the wait lets the wait's block-wide barrier double as the release of the
// stage being refilled (it held tile k-1, which every thread finished before arriving), so the
// barrier-based mechanisms need one barrier per tile, and Stages-1 tiles stay in flight while
// tile k is consumed. With one stage nothing can be in flight: produce(k) comes first, and the
// release is a barrier.
//
// Releases: tile k's stage is released only if tile k + Stages will be produced into it. A
// release nobody acquires would leave a completed barrier phase that no thread ever waits on
// (the tma ring's "empty" mbarriers), which compute-sanitizer's synccheck reports as a missing
// wait. Each block runs one ring pass. cuda::pipeline is the exception: its consumer_release
// also moves the consumer to the next stage, so its rings (kReleaseEveryTile) release every tile.
//
// Partitioned (`specialized`): the producer warp loops acquire/copy/commit while the consumer
// warps loop wait/consume/release; the ring's barriers order them.
#pragma once

#include "engine/common.cuh"
#include "engine/rings.cuh"

namespace cupipe {
namespace engine {


// What a loader sees of the stage being produced.
template <class Ring>
struct StageWriter {
  Ring& ring;
  const StageState<Ring::kStages>& st;
  char* stage;
  // Copies [src, src + nbytes) to stage + offset; offset and src must agree modulo the copy width.
  // TailMode::MayOverwrite lets `primitives` zero-fill up to V bytes past the segment.
  CUPIPE_DEVICE void copy(int64_t offset, const void* src, int64_t nbytes,
                          TailMode tail = TailMode::Exact) const {
    ring.copy(st, stage + offset, static_cast<const char*>(src), nbytes, tail);
  }
  // copy() for a segment whose offset, source and length are all multiples of the ring's copy
  // width (16 bytes): no head or tail to split off, so no alignment arithmetic before the copy.
  CUPIPE_DEVICE void copy_aligned(int64_t offset, const void* src, int64_t nbytes) const {
    ring.copy_aligned(st, stage + offset, static_cast<const char*>(src), nbytes);
  }
  // The threads that may also write the stage with plain stores before the commit (halo fills,
  // zero rows): their stores are published with the stage. All threads, except under
  // `specialized`, where the producer warp alone fills the stage.
  CUPIPE_DEVICE Team store_team() const { return Ring::store_team(); }
  // A box of `nrows` rows of `row_bytes`: row i from src + i*src_pitch to stage + offset +
  // i*dst_pitch. Each row must agree with its source modulo the copy width, as for copy().
  CUPIPE_DEVICE void copy_rows(int64_t offset, int64_t dst_pitch, const void* src, int64_t src_pitch,
                               int64_t row_bytes, int nrows, TailMode tail = TailMode::Exact) const {
    ring.copy_rows(st, stage + offset, dst_pitch, static_cast<const char*>(src), src_pitch, row_bytes, nrows, tail);
  }
  // Rows that are no box: row_at(i) gives row i's RowCopy (stage offset and source, or a null
  // source for none), each of row_bytes and agreeing with its source modulo the copy width. D: how
  // per-thread rings deal them out (RowDeal: ByChunk for rows shorter than a chunk a thread).
  template <RowDeal D = RowDeal::ByRow, class RowAt>
  CUPIPE_DEVICE void copy_each_row(int nrows, int64_t row_bytes, RowAt&& row_at, TailMode tail = TailMode::Exact) const {
    ring.template copy_each_row<D>(st, stage, nrows, row_bytes, row_at, tail);
  }
  // Rings with kTensorCopies (tma): the box of tensor map `tmap` at (c0, c1, c2) to stage +
  // offset (128-byte aligned), `bytes` the box's size.
  static constexpr bool kTensorCopies = Ring::kTensorCopies;
  template <class R = Ring>
  CUPIPE_DEVICE void copy_tensor_3d(int64_t offset, const void* tmap, int c0, int c1, int c2, uint32_t bytes) const {
    static_cast<R&>(ring).copy_tensor_3d(st, stage + offset, tmap, c0, c1, c2, bytes);
  }
};

struct NoSetup {
  CUPIPE_DEVICE void operator()() const {}
};

template <class Ring, class Load, class Consume, class Ready>
CUPIPE_DEVICE void run_unified(Ring& ring, int64_t ntiles, Load&& load, Consume&& consume, Ready&& ready) {
  constexpr int S = Ring::kStages;
  StageState<S> ps, cs;
  int64_t fetched = 0;
  auto produce = [&]() {
    ring.producer_acquire(ps);
    load(StageWriter<Ring>{ring, ps, ring.stage(ps.index)}, fetched);
    ring.producer_commit(ps);
    ps.advance();
    ++fetched;
  };
  while (fetched < S - 1 && fetched < ntiles) produce();
  const Team team{Ring::consumer_rank(), Ring::num_consumers()};
  for (int64_t k = 0; k < ntiles; ++k) {
    if (S == 1) produce();
    if (k == 0) ready();
    ring.consumer_wait(cs, static_cast<int>(fetched - k - 1));
    if (S > 1 && fetched < ntiles) produce();
    consume(ring.stage(cs.index), k, team);
    if (Ring::kReleaseEveryTile || k + S < ntiles) ring.consumer_release(cs);  // see "Releases"
    cs.advance();
  }
}

// ready() on both sides: the producer's after its first tile (whose acquire cannot block), the
// consumers' before their first wait, so a barrier in it meets every thread.
template <class Ring, class Load, class Consume, class Ready>
CUPIPE_DEVICE void run_partitioned(Ring& ring, int64_t ntiles, Load&& load, Consume&& consume, Ready&& ready) {
  constexpr int S = Ring::kStages;
  StageState<S> st;
  if (Ring::is_producer()) {
    for (int64_t k = 0; k < ntiles; ++k) {
      ring.producer_acquire(st);
      load(StageWriter<Ring>{ring, st, ring.stage(st.index)}, k);
      ring.producer_commit(st);
      st.advance();
      if (k == 0) ready();
    }
  } else {
    const Team team{Ring::consumer_rank(), Ring::num_consumers()};
    for (int64_t k = 0; k < ntiles; ++k) {
      if (k == 0) ready();
      ring.consumer_wait(st, 0);
      consume(ring.stage(st.index), k, team);
      if (Ring::kReleaseEveryTile || k + S < ntiles) ring.consumer_release(st);
      st.advance();
    }
  }
}

// Runs the block's tiles through `ring` with the driver its mechanism needs.
template <class Ring, class Load, class Consume, class Ready = NoSetup>
CUPIPE_DEVICE void run_ring(Ring& ring, int64_t ntiles, Load&& load, Consume&& consume, Ready&& ready = Ready{}) {
  if constexpr (Ring::kPartitioned)
    run_partitioned(ring, ntiles, load, consume, ready);
  else
    run_unified(ring, ntiles, load, consume, ready);
}

}  // namespace engine
}  // namespace cupipe
