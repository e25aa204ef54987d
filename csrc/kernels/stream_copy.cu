// launch_stream_copy: picks the widest copy the two pointers allow, then the mechanism's kernel.
#include "kernels/stream_copy.cuh"

namespace cupipe {

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
