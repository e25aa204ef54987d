// stream_copy on the engine: the body of the copy streams through the stage ring in tiles of
// `tile_bytes`; consumers store each landed tile with 16-byte stores, except under `tma`, where
// the tile leaves shared memory the way it came in: one bulk store (shared -> global) issued by
// the producing thread, so a tile never passes through registers. The launcher takes mechanism,
// stages and copy width at run time; the kernel's instances come from the registry (registry.h).
#pragma once

#include "engine/engine.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/kernel_id.h"
#include "kernels/launch_utils.cuh"

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

inline int default_copy_tile(engine::Mechanism m, int stages, const DeviceInfo& dev) {
  int t = m == engine::Mechanism::Sync && stages == 1 ? 2 * kCopyTileBytes : kCopyTileBytes;
  while (t > 1024 && static_cast<int64_t>(stages) * t + 1024 > dev.max_smem_optin) t /= 2;
  return t;
}
constexpr int copy_tiles_per_block(engine::Mechanism m, int stages) {
  return m == engine::Mechanism::Sync && stages == 1 ? 1 : kCopyTilesPerBlock;
}

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

// Launches p's mechanism, stage count and copy width (already validated and narrowed to what the
// pointers allow: launch_stream_copy).
inline void launch_stream_copy_plan(const StreamCopyParams& p, int head) {
  const engine::Mechanism M = p.mechanism;
  const int S = p.stages;
  if (S < 1 || S > engine::kMaxStages) throw std::runtime_error("stages must be 1..8, got " + std::to_string(S));
  const int V = M == engine::Mechanism::Tma ? 16 : p.vec_bytes;
  const bool width_ok = V == 4 || V == 8 || V == 16 || (M == engine::Mechanism::Sync && (V == 1 || V == 2));
  if (!width_ok) throw std::runtime_error("async copy width must be 4, 8 or 16, got " + std::to_string(V));
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(p.stream);
  const auto kernel = kernel_ref<const char*, char*, int64_t, int, int, TileShare>(
      kStreamCopyHeader, kernel_id("stream_copy_kernel", M, S, V), stream);
  const DeviceInfo dev = device_info(current_device());
  const int tile = p.tile_bytes > 0 ? p.tile_bytes : default_copy_tile(M, S, dev);
  const size_t smem = static_cast<size_t>(S) * tile;
  prepare_smem(kernel, smem, "stream_copy");
  const int64_t body = p.bytes - head;
  const int64_t ntiles = (body + tile - 1) / tile;
  const int tpb = copy_tiles_per_block(M, S);
  int64_t grid = p.max_blocks > 0 ? p.max_blocks : (ntiles + tpb - 1) / tpb;
  if (grid > ntiles) grid = ntiles;
  if (grid < 1) grid = 1;
  launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(kCopyThreads), smem, stream, false,
                static_cast<const char*>(p.src), static_cast<char*>(p.dst), p.bytes, head, tile,
                TileShare(ntiles, grid));
}

}  // namespace kernels
}  // namespace cupipe
