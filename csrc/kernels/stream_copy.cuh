// stream_copy on the engine: the body of the copy streams through the stage ring in tiles of
// `tile_bytes`; consumers store each landed tile with 16-byte stores, except under `tma`, where
// the tile leaves shared memory the way it came in: one bulk store (shared -> global) issued by
// the producing thread, so a tile never passes through registers. The kernel template is
// instantiated per mechanism in stream_copy_<mechanism>.cu so the files compile in parallel.
#pragma once

#include "engine/engine.cuh"
#include "kernels/fast_div.cuh"
#include "kernels/launch_utils.cuh"

namespace cupipe {
namespace kernels {

constexpr int kCopyThreads = 256;

// Bytes per stage and tiles per block: grids of short-lived blocks of two 8 KiB tiles. Blocks that
// retire and are replaced in address order keep the device's reads and writes in a narrow window
// of memory; a wave of persistent blocks drifts apart and copies slower, as do wider tiles per
// block and narrower ones (the ring's set-up per block). Every mechanism and stage count runs this
// grid (stages still overlap a block's two tiles) but sync with one stage, the table's choice on
// sm_90, which copies one 16 KiB tile per block (docs/design.md).
// _stream_copy_ex's tile_bytes and max_blocks override the grid (the latency study).
constexpr int kCopyTileBytes = 8192;
constexpr int kCopyTilesPerBlock = 2;

template <engine::Mechanism M>
int default_copy_tile(int stages, const DeviceInfo& dev) {
  int t = M == engine::Mechanism::Sync && stages == 1 ? 2 * kCopyTileBytes : kCopyTileBytes;
  while (t > 1024 && static_cast<int64_t>(stages) * t + 1024 > dev.max_smem_optin) t /= 2;
  return t;
}
template <engine::Mechanism M>
constexpr int copy_tiles_per_block(int stages) {
  return M == engine::Mechanism::Sync && stages == 1 ? 1 : kCopyTilesPerBlock;
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

// Launches mechanism M with the run-time stage count and copy width of `p` (already validated).
template <engine::Mechanism M>
void launch_stream_copy_mechanism(const StreamCopyParams& p, int head) {
  dispatch_stages(p.stages, [&](auto s) {
    constexpr int S = decltype(s)::value;
    auto go = [&](auto v) {
      constexpr int V = decltype(v)::value;
      auto kernel = stream_copy_kernel<M, S, V>;
      const DeviceInfo dev = device_info(current_device());
      const int tile = p.tile_bytes > 0 ? p.tile_bytes : default_copy_tile<M>(S, dev);
      const size_t smem = static_cast<size_t>(S) * tile;
      prepare_smem(kernel, smem, "stream_copy");
      const int64_t body = p.bytes - head;
      const int64_t ntiles = (body + tile - 1) / tile;
      const int tpb = copy_tiles_per_block<M>(S);
      int64_t grid = p.max_blocks > 0 ? p.max_blocks : (ntiles + tpb - 1) / tpb;
      if (grid > ntiles) grid = ntiles;
      if (grid < 1) grid = 1;
      kernel<<<static_cast<unsigned>(grid), kCopyThreads, smem, reinterpret_cast<cudaStream_t>(p.stream)>>>(
          static_cast<const char*>(p.src), static_cast<char*>(p.dst), p.bytes, head, tile, TileShare(ntiles, grid));
      CUPIPE_LAUNCH_CHECK();
    };
    if constexpr (M == engine::Mechanism::Tma) {
      go(int_c<16>{});
    } else if constexpr (M == engine::Mechanism::Sync) {
      switch (p.vec_bytes) {
        case 1: go(int_c<1>{}); break;
        case 2: go(int_c<2>{}); break;
        default: dispatch_async_width(p.vec_bytes, go);
      }
    } else {
      dispatch_async_width(p.vec_bytes, go);
    }
  });
}

}  // namespace kernels
}  // namespace cupipe
