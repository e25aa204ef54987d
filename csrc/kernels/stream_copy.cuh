// stream_copy on the engine: the body of the copy streams through the stage ring in tiles of
// `tile_bytes`; consumers store each landed tile with 16-byte stores, except under `tma`, where
// the tile leaves shared memory the way it came in: one bulk store (shared -> global) issued by
// the producing thread, so a tile never passes through registers. This header is the kernel
// alone (what its instances compile); the launcher, in stream_copy.cu, takes mechanism, stages and
// copy width at run time and finds the instance in the registry (registry.h).
#pragma once

#include "engine/engine.cuh"
#include "kernels/fast_div.cuh"

namespace cupipe {
namespace kernels {

constexpr int kCopyThreads = 256;
// The header that declares this file's kernel (a first-use compile includes it).
constexpr const char* kStreamCopyHeader = "kernels/stream_copy.cuh";

// Bytes per stage and tiles per block: grids of short-lived blocks of two 8 KiB tiles. Blocks that
// retire and are replaced in address order keep the device's reads and writes in a narrow window
// of memory; a wave of persistent blocks drifts apart and copies slower, as do wider tiles per
// block and narrower ones (the ring's set-up per block). Every mechanism and stage count runs this
// grid (stages still overlap a block's two tiles) but sync with one stage, the table's choice on
// sm_90, which copies one 16 KiB tile per block (docs/design.md).
// _stream_copy_ex's tile_bytes and max_blocks override the grid (the latency study).
constexpr int kCopyTileBytes = 8192;
constexpr int kCopyTilesPerBlock = 2;

// dst + head is 16-byte aligned; (src - dst) is a multiple of V (the launcher narrows V until it
// is), so every tile's source agrees with its 16-aligned stage buffer modulo V. Block b copies
// tiles b, b + grid, ...: its TileShare, worked out by the launcher.
template <engine::Mechanism M, int S, int V>
__global__ void __launch_bounds__(kCopyThreads)
    stream_copy_kernel(const char* __restrict__ src, char* __restrict__ dst, int64_t bytes, int head,
                       int tile_bytes, TileShare share) {
  if constexpr (!engine::mechanism_in_this_pass(M)) { __trap(); return; }  // tma below sm_90 (mechanism.h)
  using Ring = engine::Ring<M, S, V>;
  extern __shared__ __align__(engine::kStageAlign) char smem[];
  __shared__ engine::RawShared<typename Ring::SharedState> ss;
  Ring ring(ss.get(), smem, tile_bytes);

  if (blockIdx.x == 0 && threadIdx.x < head) dst[threadIdx.x] = src[threadIdx.x];
  const char* s0 = src + head;
  char* d0 = dst + head;
  const int64_t body = bytes - head;
  const int64_t mine = share.of(blockIdx.x);

  auto tile_offset = [&](int64_t k) { return (blockIdx.x + k * gridDim.x) * static_cast<int64_t>(tile_bytes); };
  // tma: thread 0 both refills stages and bulk-stores them. The stage being refilled held the
  // tile consumed just before (see stage_ring.cuh), whose store is this thread's latest bulk
  // group: wait until that group has read its source.
  constexpr bool kBulkStore = M == engine::Mechanism::Tma;
  auto load = [&](const auto& w, int64_t k) {
    const int64_t off = tile_offset(k);
    if constexpr (kBulkStore) {
      if (threadIdx.x == 0) engine::sm90::bulk_wait_group_read<0>();
    }
    w.copy(0, s0 + off, min(static_cast<int64_t>(tile_bytes), body - off), engine::TailMode::MayOverwrite);
  };
  auto consume = [&](const char* stage, int64_t k, engine::Team team) {
    const int64_t off = tile_offset(k);
    const int n = static_cast<int>(min(static_cast<int64_t>(tile_bytes), body - off));
    char* d = d0 + off;
    const int nvec = n / 16;
    if constexpr (kBulkStore) {
      // The body was written by the bulk load (the async proxy, like the store), so no proxy
      // fence is needed; the tail bytes that thread 0 copied by hand are not part of it.
      if (team.rank == 0 && nvec > 0) {
        engine::sm90::bulk_copy_s2g(d, stage, static_cast<uint32_t>(nvec) * 16u);
        engine::sm90::bulk_commit_group();
      }
    } else {
      for (int i = team.rank; i < nvec; i += team.size)
        reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(stage)[i];
    }
    if (team.rank == 0) engine::copy_bytes(d + nvec * 16, stage + nvec * 16, n - nvec * 16);
  };
  engine::run_ring(ring, mine, load, consume);
  if constexpr (kBulkStore) {
    if (threadIdx.x == 0) engine::sm90::bulk_wait_group_read<0>();  // shared memory outlives the reads
  }
}

}  // namespace kernels
}  // namespace cupipe
