// Small device helpers of the engine: vector types by width, byte copies, segment splitting.
#pragma once

#include <cstdint>

#include "engine/mechanism.h"

#if defined(__CUDACC__)
#define CUPIPE_DEVICE __device__ __forceinline__
#define CUPIPE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CUPIPE_DEVICE inline
#define CUPIPE_HOST_DEVICE inline
#endif

namespace cupipe {
namespace engine {

// The register type that moves `Bytes` bytes in one load or store.
template <int Bytes> struct VecType;
template <> struct VecType<1> { using type = uint8_t; };
template <> struct VecType<2> { using type = uint16_t; };
template <> struct VecType<4> { using type = uint32_t; };
template <> struct VecType<8> { using type = uint2; };
template <> struct VecType<16> { using type = uint4; };
template <int Bytes> using vec_t = typename VecType<Bytes>::type;

// Stage buffers start at this alignment (TMA wants 16; 128 is what the hardware likes best).
constexpr int kStageAlign = 128;

CUPIPE_HOST_DEVICE int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// How a per-thread ring deals copy_each_row's rows to its threads: a row at a time (rows of many
// chunks: each row's split worked out once), or every row's chunks at once (short rows, such as a
// stencil window's: a row at a time leaves most threads idle while every one works out each split).
// The collective rings deal rows to their store team either way.
enum class RowDeal { ByRow, ByChunk };

// One row of copy_each_row: it lands at `offset` in the stage; src == nullptr: no copy.
struct RowCopy {
  int64_t offset;
  const void* src;
};

// A contiguous byte range split for copies `V` bytes wide: an unaligned head (< V bytes,
// up to the first V-aligned source address), a body of whole V-byte chunks, and a tail (< V).
struct Segment {
  int head;
  int64_t body;
  int tail;
};

template <int V>
CUPIPE_HOST_DEVICE Segment split_segment(const void* src, int64_t nbytes) {
  const int mis = static_cast<int>(reinterpret_cast<uintptr_t>(src) & (V - 1));
  int head = mis == 0 ? 0 : V - mis;
  if (head > nbytes) head = static_cast<int>(nbytes);
  const int64_t body = (nbytes - head) / V * V;
  return Segment{head, body, static_cast<int>(nbytes - head - body)};
}

// Byte-wise copy for heads and tails (a few bytes; never on the bulk path). A rolled loop on
// purpose: an unrolled, load-all-then-store version (or an out-of-line one) nearly doubled the
// register count of the streaming kernels that carry it, and cut their occupancy (docs/design.md).
CUPIPE_DEVICE void copy_bytes(char* dst, const char* src, int n) {
#pragma unroll 1
  for (int i = 0; i < n; ++i) dst[i] = src[i];
}

// A group of cooperating threads: this thread's rank and the group's size (rank < 0: not a member).
struct Team {
  int rank;
  int size;
};

#if defined(__CUDACC__)
// Synchronises a consuming team: the whole block (barrier 0), or the consumer warps of a
// partitioned ring (the block's last t.size threads, a multiple of 32) on named barrier 1,
// which no ring uses.
CUPIPE_DEVICE void team_sync(Team t) {
  if (t.size == static_cast<int>(blockDim.x))
    __syncthreads();
  else
    asm volatile("bar.sync 1, %0;" ::"r"(t.size) : "memory");
}
#endif

// Uninitialised storage for a ring's shared state. Declare it __shared__ in the kernel; the ring
// constructor initialises what it needs (static __shared__ objects get no constructor call).
template <class T>
struct RawShared {
  alignas(T) unsigned char bytes[sizeof(T)];
  CUPIPE_DEVICE T& get() { return *reinterpret_cast<T*>(bytes); }
};

// The position of one stage in the ring: which buffer, and the parity of the ring's current lap.
// Barrier-based mechanisms wait on the phase; the others only use the index.
template <int Stages>
struct StageState {
  int index = 0;
  uint32_t phase = 0;
  CUPIPE_DEVICE void advance() {
    if (++index == Stages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace engine
}  // namespace cupipe
