// launch_stream_copy: picks the widest copy the two pointers allow, then the mechanism's kernel.
#include "kernels/stream_copy.cuh"

#include <stdexcept>
#include <string>

#include "kernels/kernel_id.h"
#include "kernels/launch_utils.cuh"

namespace cupipe {
namespace kernels {
namespace {

int default_copy_tile(engine::Mechanism m, int stages, const DeviceInfo& dev) {
  int t = m == engine::Mechanism::Sync && stages == 1 ? 2 * kCopyTileBytes : kCopyTileBytes;
  while (t > 1024 && static_cast<int64_t>(stages) * t + 1024 > dev.max_smem_optin) t /= 2;
  return t;
}
constexpr int copy_tiles_per_block(engine::Mechanism m, int stages) {
  return m == engine::Mechanism::Sync && stages == 1 ? 1 : kCopyTilesPerBlock;
}

// Launches p's mechanism, stage count and copy width (already validated and narrowed to what the
// pointers allow: launch_stream_copy).
void launch_stream_copy_plan(const StreamCopyParams& p, int head) {
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

}  // namespace
}  // namespace kernels

void launch_stream_copy(const StreamCopyParams& p_in) {
  using engine::Mechanism;
  StreamCopyParams p = p_in;
  if (p.bytes <= 0) return;
  // Tiles are aligned to the destination; the head before its first 16-byte boundary is copied
  // directly. The source agrees with the destination modulo the lowest set bit of their distance.
  const uintptr_t s = reinterpret_cast<uintptr_t>(p.src), d = reinterpret_cast<uintptr_t>(p.dst);
  int head = static_cast<int>((16 - d % 16) % 16);
  if (head > p.bytes) head = static_cast<int>(p.bytes);
  const uintptr_t delta = (s - d) & 15u;
  const int agree = delta == 0 ? 16 : static_cast<int>(delta & (~delta + 1));  // 1, 2, 4, 8 or 16
  if (p.vec_bytes > agree) p.vec_bytes = agree;
  if (p.mechanism == Mechanism::Tma && p.vec_bytes < 16) p.mechanism = Mechanism::Primitives;
  if (p.vec_bytes < 4) p.mechanism = Mechanism::Sync;  // no async copy narrower than 4 bytes
  kernels::launch_stream_copy_plan(p, head);
}

}  // namespace cupipe
