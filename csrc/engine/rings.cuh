// The eight copy mechanisms as stage-ring policies.
//
// Every ring owns `Stages` equal shared-memory stage buffers and speaks the four verbs of a
// producer/consumer pipeline (CUTLASS's vocabulary; cuda::pipeline's, too):
//
//   producer_acquire(st)          wait until stage st.index may be overwritten
//   copy(st, dst, src, nbytes)    issue the global->shared copy of one segment into the stage
//   copy_rows(st, dst, dst_pitch, src, src_pitch, row_bytes, nrows)
//                                 the same for a box of rows (a 2-D tile): per-thread rings deal
//                                 the chunks of all rows out to all threads at once
//   copy_each_row<D>(st, stage, nrows, row_bytes, row_at)
//                                 rows that are no box (each at its own shift, or from its own
//                                 source row): row_at(i) gives row i's RowCopy {stage offset,
//                                 source}; collective rings deal the rows' heads and tails out to
//                                 the threads, as in a box; per-thread rings a row at a time or,
//                                 RowDeal::ByChunk, every row's chunks at once
//   copy_tensor_3d(st, dst, tmap, c0, c1, c2, bytes)
//                                 tma only (kTensorCopies): one box of a tensor map, a whole tile
//                                 with its out-of-range elements as zeros
//   producer_commit(st)           close the stage: its copies complete as one unit
//   consumer_wait(st, pending)    block until the stage's copies landed and are visible to every
//                                 consumer; `pending` = stages produced after this one (the
//                                 wait_prior-style mechanisms wait for all but those)
//   consumer_release(st)          the consumers are done reading the stage
//
// `copy` may be called several times per stage (a stencil tile is several rows). Precondition:
// dst and src agree modulo V (the copy width). Heads and tails narrower than V move synchronously
// (a box's rows' heads and tails dealt out to the threads), except that with TailMode::MayOverwrite
// the `primitives` ring moves the tail with the zero-fill form of LDGSTS, which writes the whole
// last V-byte chunk: the caller promises the stage has V bytes of slack after the segment that
// nothing else writes.
//
// Unified rings (all threads produce and consume) are driven by run_unified in stage_ring.cuh;
// the partitioned one (`specialized`) by run_partitioned.
#pragma once

// CUPIPE_ENGINE_MECHANISMS: the mechanisms a translation unit compiles, a bit mask over
// Mechanism's values (default: all). The kernel instance files (cupipe/_kernels.py) set it to the
// mechanisms their ids name, so that libcu++'s pipeline and barrier headers and cooperative
// groups, most of a compile's header parsing (docs/design.md), are parsed only where a ring uses
// them: the rings on those libraries are left out otherwise (a kernel of one does not compile);
// sync, primitives and tma need none and are always there.
#ifndef CUPIPE_ENGINE_MECHANISMS
#define CUPIPE_ENGINE_MECHANISMS 0xff
#endif
#define CUPIPE_ENGINE_HAS(m) ((CUPIPE_ENGINE_MECHANISMS >> (m)) & 1)
#define CUPIPE_ENGINE_HAS_PIPELINE (CUPIPE_ENGINE_HAS(1) || CUPIPE_ENGINE_HAS(2) || CUPIPE_ENGINE_HAS(6))
#define CUPIPE_ENGINE_HAS_CG (CUPIPE_ENGINE_HAS(1) || CUPIPE_ENGINE_HAS(4) || CUPIPE_ENGINE_HAS(5) || CUPIPE_ENGINE_HAS(6))

#if CUPIPE_ENGINE_HAS_CG
#include <cooperative_groups.h>
#endif
#if CUPIPE_ENGINE_HAS(4)
#include <cooperative_groups/memcpy_async.h>
#endif
#if CUPIPE_ENGINE_HAS(4) || CUPIPE_ENGINE_HAS(5)
#include <cuda/barrier>  // cuda::barrier, cuda::aligned_size_t
#endif
#if CUPIPE_ENGINE_HAS_PIPELINE
#include <cuda/pipeline>
#endif
#include <cuda_pipeline_primitives.h>

#include "engine/common.cuh"
#include "engine/mbarrier.cuh"

namespace cupipe {
namespace engine {

static_assert(int(Mechanism::Pipeline) == 1 && int(Mechanism::PipelineThread) == 2 && int(Mechanism::Cg) == 4 &&
                  int(Mechanism::Barrier) == 5 && int(Mechanism::Specialized) == 6,
              "CUPIPE_ENGINE_HAS numbers the mechanisms as Mechanism does");

#if CUPIPE_ENGINE_HAS_CG
namespace cg = cooperative_groups;
#endif

enum class TailMode { Exact, MayOverwrite };

// Copies one segment with `nthreads` threads of rank `rank`: the body as V-byte chunks handed to
// `chunk(dst, src)`, the head (up to V - 1 bytes before the first V-aligned byte) to
// `head(dst, src, n)` and the tail to `tail(dst, src, n)`.
template <int V, class Chunk, class Head, class Tail>
CUPIPE_DEVICE void copy_segment(char* dst, const char* src, int64_t nbytes, int rank, int nthreads,
                                Chunk&& chunk, Head&& head, Tail&& tail) {
  const Segment s = split_segment<V>(src, nbytes);
  if (rank == 0 && s.head > 0) head(dst, src, s.head);
  char* d = dst + s.head;
  const char* g = src + s.head;
  const int64_t nchunks = s.body / V;
  for (int64_t c = rank; c < nchunks; c += nthreads) chunk(d + c * V, g + c * V);
  if (s.tail > 0 && rank == (nthreads > 1 ? 1 : 0)) tail(d + s.body, g + s.body, s.tail);
}

// Copies `nrows` rows of `row_bytes` (row i: src + i*src_pitch -> dst + i*dst_pitch) with
// `nthreads` threads. When both pitches are multiples of V every row splits like the first, and
// the rows' V-byte chunks are dealt out to all threads as one (row, chunk) sequence, so a tile of
// short rows keeps every thread busy; otherwise each row is a segment of its own. A box lies in
// one stage, so its chunk count fits 32 bits; the walk keeps row pointers and steps them.
template <int V, class Chunk, class Head, class Tail>
CUPIPE_DEVICE void copy_box(char* dst, int64_t dst_pitch, const char* src, int64_t src_pitch, int64_t row_bytes,
                            int nrows, int rank, int nthreads, Chunk&& chunk, Head&& head, Tail&& tail) {
  if (dst_pitch % V != 0 || src_pitch % V != 0) {
    for (int i = 0; i < nrows; ++i)
      copy_segment<V>(dst + i * dst_pitch, src + i * src_pitch, row_bytes, rank, nthreads, chunk, head, tail);
    return;
  }
  const Segment s = split_segment<V>(src, row_bytes);
  if (s.head > 0 || s.tail > 0) {
    for (int i = rank; i < nrows; i += nthreads) {
      if (s.head > 0) head(dst + i * dst_pitch, src + i * src_pitch, s.head);
      if (s.tail > 0) tail(dst + i * dst_pitch + s.head + s.body, src + i * src_pitch + s.head + s.body, s.tail);
    }
  }
  const int nch = static_cast<int>(s.body / V);
  if (nch == 0 || rank >= nthreads) return;
  // Unsigned: a signed division costs a dozen more instructions, in every thread of every tile.
  const unsigned r0 = static_cast<unsigned>(rank) / nch, c0 = static_cast<unsigned>(rank) % nch;
  const unsigned dr = static_cast<unsigned>(nthreads) / nch, dc = static_cast<unsigned>(nthreads) % nch;
  if (dc == 0) {  // every thread keeps one chunk column and steps down the rows
    char* d = dst + r0 * dst_pitch + s.head + c0 * V;
    const char* g = src + r0 * src_pitch + s.head + c0 * V;
    const int64_t d_step = dr * dst_pitch, g_step = dr * src_pitch;
#pragma unroll 4
    for (int r = r0; r < nrows; r += dr, d += d_step, g += g_step) chunk(d, g);
    return;
  }
  const int total = nch * nrows;
  int r = r0, c = c0;
  char* d = dst + r * dst_pitch + s.head;
  const char* g = src + r * src_pitch + s.head;
  const int64_t d_step = dr * dst_pitch, g_step = dr * src_pitch;
  for (int idx = rank; idx < total; idx += nthreads) {
    chunk(d + c * V, g + c * V);
    c += dc;
    d += d_step;
    g += g_step;
    if (c >= nch) {
      c -= nch;
      d += dst_pitch;
      g += src_pitch;
    }
  }
}

// Waits until at most `n` cp.async groups of this thread are pending (wait_group needs a constant).
CUPIPE_DEVICE void cp_async_wait_prior(int n) {
  switch (n) {
    case 0: __pipeline_wait_prior(0); break;
    case 1: __pipeline_wait_prior(1); break;
    case 2: __pipeline_wait_prior(2); break;
    case 3: __pipeline_wait_prior(3); break;
    case 4: __pipeline_wait_prior(4); break;
    case 5: __pipeline_wait_prior(5); break;
    case 6: __pipeline_wait_prior(6); break;
    default: __pipeline_wait_prior(7); break;  // waiting for more than asked is still correct
  }
}

template <int Stages>
struct RingBase {
  static constexpr int kStages = Stages;
  static constexpr bool kPartitioned = false;
  // cuda::pipeline advances its consumer position in consumer_release, so its rings release
  // every tile; the others skip releases that no producer will acquire (see stage_ring.cuh).
  static constexpr bool kReleaseEveryTile = false;
  static constexpr bool kNarrowAsync = false;  // see PerThreadCopies::narrow
  static constexpr bool kTensorCopies = false;  // copy_tensor_3d: tma only
  char* buffers;
  int stage_bytes;
  CUPIPE_DEVICE RingBase(char* b, int sb) : buffers(b), stage_bytes(sb) {}
  CUPIPE_DEVICE char* stage(int index) const { return buffers + static_cast<int64_t>(index) * stage_bytes; }
  // Unified rings: every thread copies and consumes.
  CUPIPE_DEVICE static int consumer_rank() { return threadIdx.x; }
  CUPIPE_DEVICE static int num_consumers() { return blockDim.x; }
  CUPIPE_DEVICE static bool is_producer() { return true; }
  CUPIPE_DEVICE static bool is_consumer() { return true; }
  CUPIPE_DEVICE static Team store_team() { return Team{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)}; }
};


// The two ways a ring moves a segment or a box of rows. Per-thread rings (every copying thread
// issues its own V-byte chunks) provide chunk(dst, src), tail(dst, src, n, mode) and
// copy_team(); block-collective rings provide copy() and get copy_rows() as one copy per row.
// Per-thread rings that can issue 4- and 8-byte async copies (kNarrowAsync, narrow_chunk<W>)
// move heads and tails that way when the addresses and length allow (a stencil window's row
// starts rx elements before an aligned column); the others copy them with plain loads and stores.
template <class Derived, int V>
struct PerThreadCopies {
  template <class St>
  CUPIPE_DEVICE void copy(const St&, char* dst, const char* src, int64_t n, TailMode mode = TailMode::Exact) {
    auto& self = static_cast<Derived&>(*this);
    const Team t = Derived::copy_team();
    copy_segment<V>(dst, src, n, t.rank, t.size, [&](char* d, const char* g) { self.chunk(d, g); },
                    [&](char* d, const char* g, int hn) { self.narrow(d, g, hn); },
                    [&](char* d, const char* g, int tn) { self.tail(d, g, tn, mode); });
  }
  template <class St>
  CUPIPE_DEVICE void copy_rows(const St&, char* dst, int64_t dst_pitch, const char* src, int64_t src_pitch,
                               int64_t row_bytes, int nrows, TailMode mode = TailMode::Exact) {
    auto& self = static_cast<Derived&>(*this);
    const Team t = Derived::copy_team();
    copy_box<V>(dst, dst_pitch, src, src_pitch, row_bytes, nrows, t.rank, t.size,
                [&](char* d, const char* g) { self.chunk(d, g); },
                [&](char* d, const char* g, int hn) { self.narrow(d, g, hn); },
                [&](char* d, const char* g, int tn) { self.tail(d, g, tn, mode); });
  }
  // RowDeal::ByRow: each row its own copy(). ByChunk: all rows' chunks dealt out at once (row i's
  // chunk c is item i * C + c, C the most a row holds; a row with a head holds one fewer), heads
  // and tails a row per thread.
  template <RowDeal D, class St, class RowAt>
  CUPIPE_DEVICE void copy_each_row(const St& st, char* stage, int nrows, int64_t row_bytes, RowAt&& row_at,
                                   TailMode mode = TailMode::Exact) {
    if constexpr (D == RowDeal::ByRow) {
      for (int i = 0; i < nrows; ++i) {
        const RowCopy r = row_at(i);
        if (r.src != nullptr) copy(st, stage + r.offset, static_cast<const char*>(r.src), row_bytes, mode);
      }
    } else {
      auto& self = static_cast<Derived&>(*this);
      const Team t = Derived::copy_team();
      if (t.rank >= t.size) return;
      for (int i = t.rank; i < nrows; i += t.size) {
        const RowCopy r = row_at(i);
        if (r.src == nullptr) continue;
        const char* g = static_cast<const char*>(r.src);
        char* d = stage + r.offset;
        const Segment s = split_segment<V>(g, row_bytes);
        if (s.head > 0) self.narrow(d, g, s.head);
        if (s.tail > 0) self.tail(d + s.head + s.body, g + s.head + s.body, s.tail, mode);
      }
      const unsigned nch = static_cast<unsigned>(row_bytes / V);  // (a row lies in one stage)
      if (nch == 0) return;
      const unsigned total = static_cast<unsigned>(nrows) * nch;
      for (unsigned k = t.rank; k < total; k += t.size) {
        const unsigned i = k / nch, c = k - i * nch;
        const RowCopy r = row_at(static_cast<int>(i));
        if (r.src == nullptr) continue;
        const char* g = static_cast<const char*>(r.src);
        const Segment s = split_segment<V>(g, row_bytes);
        if (static_cast<int64_t>(c) * V < s.body) self.chunk(stage + r.offset + s.head + c * V, g + s.head + c * V);
      }
    }
  }
  // A segment whose source, destination and length are multiples of V: chunks only (it lies in
  // one stage, so its length fits 32 bits).
  template <class St>
  CUPIPE_DEVICE void copy_aligned(const St&, char* dst, const char* src, int64_t n) {
    auto& self = static_cast<Derived&>(*this);
    const Team t = Derived::copy_team();
    const int nb = static_cast<int>(n);
    for (int i = t.rank * V; i < nb; i += t.size * V) self.chunk(dst + i, src + i);
  }
  // n bytes (fewer than V) that dst and src hold at equal alignment.
  CUPIPE_DEVICE void narrow(char* d, const char* g, int n) {
    if constexpr (Derived::kNarrowAsync) {
      auto& self = static_cast<Derived&>(*this);
      const uintptr_t a = reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(g) | static_cast<uintptr_t>(n);
      if (V > 8 && (a & 7) == 0) {
        for (int k = 0; k < n; k += 8) self.template narrow_chunk<8>(d + k, g + k);
        return;
      }
      if (V > 4 && (a & 3) == 0) {
        for (int k = 0; k < n; k += 4) self.template narrow_chunk<4>(d + k, g + k);
        return;
      }
    }
    copy_bytes(d, g, n);
  }
  CUPIPE_DEVICE void tail(char* d, const char* g, int n, TailMode) { static_cast<Derived&>(*this).narrow(d, g, n); }
  CUPIPE_DEVICE static Team copy_team() { return Team{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)}; }
};

// Block-collective rings move each row's V-aligned body with one collective call,
// Derived::copy_body(st, dst, src, nbytes); the rows' unaligned heads and tails are plain copies
// dealt out to the ring's store team (one row per thread), so a box of short rows does not wait
// on one thread's byte loop.
template <class Derived, int V>
struct CollectiveCopies {
  template <class St>
  CUPIPE_DEVICE void copy(const St& st, char* dst, const char* src, int64_t n, TailMode mode = TailMode::Exact) {
    copy_rows(st, dst, 0, src, 0, n, 1, mode);
  }
  // A segment whose source, destination and length are multiples of V: one body copy.
  template <class St>
  CUPIPE_DEVICE void copy_aligned(const St& st, char* dst, const char* src, int64_t n) {
    if (n > 0) static_cast<Derived&>(*this).copy_body(st, dst, src, n);
  }
  template <class St>
  CUPIPE_DEVICE void copy_rows(const St& st, char* dst, int64_t dst_pitch, const char* src, int64_t src_pitch,
                               int64_t row_bytes, int nrows, TailMode = TailMode::Exact) {
    auto& self = static_cast<Derived&>(*this);
    const Team t = Derived::store_team();
    const bool alike = dst_pitch % V == 0 && src_pitch % V == 0;  // every row splits like the first
    Segment s = split_segment<V>(src, row_bytes);
    if (t.rank >= 0) {
      for (int i = t.rank; i < nrows; i += t.size) {
        const char* g = src + i * src_pitch;
        char* d = dst + i * dst_pitch;
        if (!alike) s = split_segment<V>(g, row_bytes);
        copy_bytes(d, g, s.head);
        copy_bytes(d + s.head + s.body, g + s.head + s.body, s.tail);
      }
    }
    for (int i = 0; i < nrows; ++i) {
      const char* g = src + i * src_pitch;
      if (!alike) s = split_segment<V>(g, row_bytes);
      if (s.body > 0) self.copy_body(st, dst + i * dst_pitch + s.head, g + s.head, s.body);
    }
  }
  // As copy_rows, for rows at offsets and sources of their own. One copy() a row would leave
  // every row's head and tail to the store team's first thread, one byte after another.
  template <RowDeal, class St, class RowAt>
  CUPIPE_DEVICE void copy_each_row(const St& st, char* stage, int nrows, int64_t row_bytes, RowAt&& row_at,
                                   TailMode = TailMode::Exact) {
    auto& self = static_cast<Derived&>(*this);
    const Team t = Derived::store_team();
    if (t.rank >= 0) {
      for (int i = t.rank; i < nrows; i += t.size) {
        const RowCopy r = row_at(i);
        if (r.src == nullptr) continue;
        const char* g = static_cast<const char*>(r.src);
        char* d = stage + r.offset;
        const Segment s = split_segment<V>(g, row_bytes);
        copy_bytes(d, g, s.head);
        copy_bytes(d + s.head + s.body, g + s.head + s.body, s.tail);
      }
    }
    if (!Derived::issues_bodies()) return;
    for (int i = 0; i < nrows; ++i) {
      const RowCopy r = row_at(i);
      if (r.src == nullptr) continue;
      const char* g = static_cast<const char*>(r.src);
      const Segment s = split_segment<V>(g, row_bytes);
      if (s.body > 0) self.copy_body(st, stage + r.offset + s.head, g + s.head, s.body);
    }
  }
  // The threads that call copy_body: every thread (collective copies), or tma's thread 0.
  CUPIPE_DEVICE static bool issues_bodies() { return true; }
};

template <Mechanism M, int Stages, int V>
struct Ring;

// ---- sync: LDG + STS through registers; a block barrier publishes the stage -------------------
template <int Stages, int V>
struct Ring<Mechanism::Sync, Stages, V> : RingBase<Stages>, PerThreadCopies<Ring<Mechanism::Sync, Stages, V>, V> {
  struct SharedState {};
  CUPIPE_DEVICE Ring(SharedState&, char* b, int sb) : RingBase<Stages>(b, sb) {}
  template <class St> CUPIPE_DEVICE void producer_acquire(const St&) {}
  CUPIPE_DEVICE void chunk(char* d, const char* g) {
    *reinterpret_cast<vec_t<V>*>(d) = *reinterpret_cast<const vec_t<V>*>(g);
  }
  template <class St> CUPIPE_DEVICE void producer_commit(const St&) {}
  template <class St> CUPIPE_DEVICE void consumer_wait(const St&, int) { __syncthreads(); }
  template <class St> CUPIPE_DEVICE void consumer_release(const St&) {
    if (Stages == 1) __syncthreads();  // the only stage is refilled next
  }
};

#if CUPIPE_ENGINE_HAS(1)
// ---- pipeline: cuda::pipeline<thread_scope_block>, unified --------------------------------------
template <int Stages, int V>
struct Ring<Mechanism::Pipeline, Stages, V> : RingBase<Stages>, PerThreadCopies<Ring<Mechanism::Pipeline, Stages, V>, V> {
  struct SharedState {
    cuda::pipeline_shared_state<cuda::thread_scope_block, Stages> state;
  };
  static constexpr bool kReleaseEveryTile = true;
  cuda::pipeline<cuda::thread_scope_block> pipe;
  CUPIPE_DEVICE Ring(SharedState& ss, char* b, int sb)
      : RingBase<Stages>(b, sb), pipe(cuda::make_pipeline(cg::this_thread_block(), &ss.state)) {}
  template <class St> CUPIPE_DEVICE void producer_acquire(const St&) { pipe.producer_acquire(); }
  CUPIPE_DEVICE void chunk(char* d, const char* g) { cuda::memcpy_async(d, g, cuda::aligned_size_t<V>(V), pipe); }
  static constexpr bool kNarrowAsync = true;
  template <int W>
  CUPIPE_DEVICE void narrow_chunk(char* d, const char* g) { cuda::memcpy_async(d, g, cuda::aligned_size_t<W>(W), pipe); }
  template <class St> CUPIPE_DEVICE void producer_commit(const St&) { pipe.producer_commit(); }
  template <class St> CUPIPE_DEVICE void consumer_wait(const St&, int) { pipe.consumer_wait(); }
  template <class St> CUPIPE_DEVICE void consumer_release(const St&) { pipe.consumer_release(); }
};
#endif

#if CUPIPE_ENGINE_HAS(2)
// ---- pipeline_thread: a cuda::pipeline<thread_scope_thread> per thread + __syncthreads ----------
template <int Stages, int V>
struct Ring<Mechanism::PipelineThread, Stages, V> : RingBase<Stages>,
                                                     PerThreadCopies<Ring<Mechanism::PipelineThread, Stages, V>, V> {
  struct SharedState {};
  cuda::pipeline<cuda::thread_scope_thread> pipe;
  CUPIPE_DEVICE Ring(SharedState&, char* b, int sb) : RingBase<Stages>(b, sb), pipe(cuda::make_pipeline()) {}
  template <class St> CUPIPE_DEVICE void producer_acquire(const St&) { pipe.producer_acquire(); }
  CUPIPE_DEVICE void chunk(char* d, const char* g) { cuda::memcpy_async(d, g, cuda::aligned_size_t<V>(V), pipe); }
  static constexpr bool kNarrowAsync = true;
  template <int W>
  CUPIPE_DEVICE void narrow_chunk(char* d, const char* g) { cuda::memcpy_async(d, g, cuda::aligned_size_t<W>(W), pipe); }
  template <class St> CUPIPE_DEVICE void producer_commit(const St&) { pipe.producer_commit(); }
  template <class St> CUPIPE_DEVICE void consumer_wait(const St&, int) {
    pipe.consumer_wait();  // this thread's copies have landed ...
    __syncthreads();       // ... and now everyone's
  }
  template <class St> CUPIPE_DEVICE void consumer_release(const St&) {
    pipe.consumer_release();
    if (Stages == 1) __syncthreads();
  }
};
#endif

// ---- primitives: __pipeline_memcpy_async / _commit / _wait_prior (LDGSTS), zero-filled tails ----
template <int Stages, int V>
struct Ring<Mechanism::Primitives, Stages, V> : RingBase<Stages>,
                                                 PerThreadCopies<Ring<Mechanism::Primitives, Stages, V>, V> {
  struct SharedState {};
  CUPIPE_DEVICE Ring(SharedState&, char* b, int sb) : RingBase<Stages>(b, sb) {}
  template <class St> CUPIPE_DEVICE void producer_acquire(const St&) {}
  CUPIPE_DEVICE void chunk(char* d, const char* g) { __pipeline_memcpy_async(d, g, V); }
  static constexpr bool kNarrowAsync = true;
  template <int W>
  CUPIPE_DEVICE void narrow_chunk(char* d, const char* g) { __pipeline_memcpy_async(d, g, W); }
  CUPIPE_DEVICE void tail(char* d, const char* g, int n, TailMode mode) {
    if (mode == TailMode::MayOverwrite)
      __pipeline_memcpy_async(d, g, V, V - n);  // reads n bytes, zero-fills the rest of the chunk
    else
      this->narrow(d, g, n);
  }
  template <class St> CUPIPE_DEVICE void producer_commit(const St&) { __pipeline_commit(); }
  template <class St> CUPIPE_DEVICE void consumer_wait(const St&, int pending) {
    cp_async_wait_prior(pending);  // one commit group per stage
    __syncthreads();
  }
  template <class St> CUPIPE_DEVICE void consumer_release(const St&) {
    if (Stages == 1) __syncthreads();
  }
};

#if CUPIPE_ENGINE_HAS(4)
// ---- cg: cooperative_groups::memcpy_async (one batch per call) + cg::wait_prior -----------------
template <int Stages, int V>
struct Ring<Mechanism::Cg, Stages, V> : RingBase<Stages>, CollectiveCopies<Ring<Mechanism::Cg, Stages, V>, V> {
  struct SharedState {};
  uint32_t issued = 0;       // batches this thread has committed
  uint32_t marks[Stages];    // `issued` when each stage was committed
  CUPIPE_DEVICE Ring(SharedState&, char* b, int sb) : RingBase<Stages>(b, sb) {}
  template <class St> CUPIPE_DEVICE void producer_acquire(const St&) {}
  template <class St>
  CUPIPE_DEVICE void copy_body(const St&, char* dst, const char* src, int64_t n) {
    cg::memcpy_async(cg::this_thread_block(), dst, src, cuda::aligned_size_t<V>(static_cast<size_t>(n)));
    ++issued;
  }
  template <class St> CUPIPE_DEVICE void producer_commit(const St& st) { marks[st.index] = issued; }
  template <class St> CUPIPE_DEVICE void consumer_wait(const St& st, int) {
    const int later = static_cast<int>(issued - marks[st.index]);  // batches issued after this stage
    auto block = cg::this_thread_block();
    switch (later) {  // cg::wait_prior also syncs the block
      case 0: cg::wait_prior<0>(block); break;
      case 1: cg::wait_prior<1>(block); break;
      case 2: cg::wait_prior<2>(block); break;
      case 3: cg::wait_prior<3>(block); break;
      case 4: cg::wait_prior<4>(block); break;
      case 5: cg::wait_prior<5>(block); break;
      case 6: cg::wait_prior<6>(block); break;
      default: cg::wait_prior<7>(block); break;
    }
  }
  template <class St> CUPIPE_DEVICE void consumer_release(const St&) {
    if (Stages == 1) __syncthreads();
  }
};
#endif

#if CUPIPE_ENGINE_HAS(5)
// ---- barrier: cuda::memcpy_async completing on a cuda::barrier<thread_scope_block> per stage -----
template <int Stages, int V>
struct Ring<Mechanism::Barrier, Stages, V> : RingBase<Stages>,
                                              CollectiveCopies<Ring<Mechanism::Barrier, Stages, V>, V> {
  using barrier_t = cuda::barrier<cuda::thread_scope_block>;
  struct SharedState {
    barrier_t bar[Stages];
  };
  barrier_t* bar;
  CUPIPE_DEVICE Ring(SharedState& ss, char* b, int sb) : RingBase<Stages>(b, sb), bar(ss.bar) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < Stages; ++s) init(&bar[s], blockDim.x);
    }
    __syncthreads();
  }
  template <class St> CUPIPE_DEVICE void producer_acquire(const St&) {}
  // The block-wide form, as in CUDA's barrier examples: libcu++ picks the instruction (LDGSTS;
  // on sm_90 with 16-byte alignment, one bulk copy issued for the whole block).
  template <class St>
  CUPIPE_DEVICE void copy_body(const St& st, char* dst, const char* src, int64_t n) {
    cuda::memcpy_async(cg::this_thread_block(), dst, src, cuda::aligned_size_t<V>(static_cast<size_t>(n)),
                       bar[st.index]);
  }
  template <class St> CUPIPE_DEVICE void producer_commit(const St&) {}
  // The phase completes when every thread has arrived and every copy on it has landed.
  template <class St> CUPIPE_DEVICE void consumer_wait(const St& st, int) { bar[st.index].arrive_and_wait(); }
  template <class St> CUPIPE_DEVICE void consumer_release(const St&) {
    if (Stages == 1) __syncthreads();
  }
};
#endif

#if CUPIPE_ENGINE_HAS(6)
// ---- specialized: partitioned cuda::pipeline, warp 0 produces, the other warps consume ----------
template <int Stages, int V>
struct Ring<Mechanism::Specialized, Stages, V> : RingBase<Stages>,
                                                  PerThreadCopies<Ring<Mechanism::Specialized, Stages, V>, V> {
  static constexpr bool kPartitioned = true;
  static constexpr bool kReleaseEveryTile = true;
  static constexpr int kProducerThreads = producer_only_threads(Mechanism::Specialized);
  struct SharedState {
    cuda::pipeline_shared_state<cuda::thread_scope_block, Stages> state;
  };
  cuda::pipeline<cuda::thread_scope_block> pipe;
  CUPIPE_DEVICE Ring(SharedState& ss, char* b, int sb)
      : RingBase<Stages>(b, sb),
        pipe(cuda::make_pipeline(cg::this_thread_block(), &ss.state,
                                 threadIdx.x < kProducerThreads ? cuda::pipeline_role::producer
                                                                : cuda::pipeline_role::consumer)) {}
  CUPIPE_DEVICE static bool is_producer() { return threadIdx.x < kProducerThreads; }
  CUPIPE_DEVICE static bool is_consumer() { return threadIdx.x >= kProducerThreads; }
  CUPIPE_DEVICE static int consumer_rank() { return threadIdx.x - kProducerThreads; }
  CUPIPE_DEVICE static int num_consumers() { return blockDim.x - kProducerThreads; }
  CUPIPE_DEVICE static Team store_team() {
    return Team{threadIdx.x < kProducerThreads ? static_cast<int>(threadIdx.x) : -1, kProducerThreads};
  }
  CUPIPE_DEVICE static Team copy_team() { return Team{static_cast<int>(threadIdx.x), kProducerThreads}; }
  template <class St> CUPIPE_DEVICE void producer_acquire(const St&) { pipe.producer_acquire(); }
  CUPIPE_DEVICE void chunk(char* d, const char* g) { cuda::memcpy_async(d, g, cuda::aligned_size_t<V>(V), pipe); }
  static constexpr bool kNarrowAsync = true;
  template <int W>
  CUPIPE_DEVICE void narrow_chunk(char* d, const char* g) { cuda::memcpy_async(d, g, cuda::aligned_size_t<W>(W), pipe); }
  template <class St> CUPIPE_DEVICE void producer_commit(const St&) { pipe.producer_commit(); }
  template <class St> CUPIPE_DEVICE void consumer_wait(const St&, int) { pipe.consumer_wait(); }
  template <class St> CUPIPE_DEVICE void consumer_release(const St&) { pipe.consumer_release(); }
};
#endif

// ---- tma: sm_90 bulk copies (UBLKCP) completing on an mbarrier with expected transaction bytes --
// Thread 0 issues the bulk copies; "full" barriers (every thread arrives, plus the tx bytes)
// publish a stage, so any thread may also fill it with plain stores (heads, tails, halos) before
// its commit; "empty" barriers (all threads arrive) hand it back. Producers wait on `empty` with
// the opposite parity, so the first lap passes at once. Bulk copies need 16-byte alignment: V = 16.
template <int Stages, int V>
struct Ring<Mechanism::Tma, Stages, V> : RingBase<Stages>, CollectiveCopies<Ring<Mechanism::Tma, Stages, V>, V> {
  static_assert(V == 16, "tma moves 16-byte-aligned bodies");
  struct SharedState {
    alignas(8) uint64_t full[Stages];
    alignas(8) uint64_t empty[Stages];
  };
  SharedState& ss;
  CUPIPE_DEVICE Ring(SharedState& s, char* b, int sb) : RingBase<Stages>(b, sb), ss(s) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < Stages; ++i) {
        sm90::mbarrier_init(&ss.full[i], blockDim.x);
        sm90::mbarrier_init(&ss.empty[i], blockDim.x);
      }
      sm90::fence_barrier_init();
    }
    __syncthreads();
  }
  // Every thread waits: any of them may write the stage with plain stores (the wait for tile k
  // is no block barrier, so a fast thread could otherwise overwrite a stage others still read).
  template <class St> CUPIPE_DEVICE void producer_acquire(const St& st) {
    sm90::mbarrier_wait_parity(&ss.empty[st.index], st.phase ^ 1u);
  }
  // Thread 0 raises the phase's transaction count before its own arrival (in producer_commit),
  // so the phase cannot complete before the copy's bytes are counted.
  CUPIPE_DEVICE static bool issues_bodies() { return threadIdx.x == 0; }
  template <class St>
  CUPIPE_DEVICE void copy_body(const St& st, char* dst, const char* src, int64_t n) {
    if (threadIdx.x != 0) return;
    sm90::mbarrier_expect_tx(&ss.full[st.index], static_cast<uint32_t>(n));
    sm90::bulk_copy_g2s(dst, src, static_cast<uint32_t>(n), &ss.full[st.index]);
  }
  // A tensor-map box (a whole 2-D tile in one instruction): `bytes` is the box's size.
  static constexpr bool kTensorCopies = true;
  template <class St>
  CUPIPE_DEVICE void copy_tensor_3d(const St& st, char* dst, const void* tmap, int c0, int c1, int c2, uint32_t bytes) {
    if (threadIdx.x != 0) return;
    sm90::mbarrier_expect_tx(&ss.full[st.index], bytes);
    sm90::tensor_copy_3d_g2s(dst, tmap, c0, c1, c2, &ss.full[st.index]);
  }
  template <class St> CUPIPE_DEVICE void producer_commit(const St& st) { sm90::mbarrier_arrive(&ss.full[st.index]); }
  template <class St> CUPIPE_DEVICE void consumer_wait(const St& st, int) {
    sm90::mbarrier_wait_parity(&ss.full[st.index], st.phase);
  }
  template <class St> CUPIPE_DEVICE void consumer_release(const St& st) {
    sm90::mbarrier_arrive(&ss.empty[st.index]);
  }
};

}  // namespace engine
}  // namespace cupipe
