// The names of the engine's copy mechanisms. Host- and device-safe, no CUDA headers, so the
// torch binding layer can share the enum with the kernels.
#pragma once

namespace cupipe {
namespace engine {

// How one tile moves global -> shared, and how its completion is signalled.
enum class Mechanism : int {
  Sync = 0,            // LDG + STS through registers, then __syncthreads: the baseline
  Pipeline = 1,        // cuda::pipeline<thread_scope_block>, unified (every thread produces/consumes)
  PipelineThread = 2,  // cuda::pipeline<thread_scope_thread> per thread + __syncthreads
  Primitives = 3,      // __pipeline_memcpy_async / _commit / _wait_prior (LDGSTS, zero-fill tails)
  Cg = 4,              // cooperative_groups::memcpy_async + cg::wait_prior
  Barrier = 5,         // cuda::memcpy_async completing on a cuda::barrier<thread_scope_block>
  Specialized = 6,     // partitioned cuda::pipeline: one producer warp, consumer warps
  Tma = 7,             // sm_90+: cp.async.bulk + mbarrier expect-tx (UBLKCP)
};

constexpr int kNumMechanisms = 8;
constexpr int kMaxStages = 8;

// Threads of a block that only produce under mechanism m (specialized's producer warp; the
// other mechanisms are unified), and the consumer threads of a block of `block_threads`. Host
// plans size their work by it; the specialized ring checks it against its own constant.
constexpr int producer_only_threads(Mechanism m) { return m == Mechanism::Specialized ? 32 : 0; }
constexpr int consumer_threads(Mechanism m, int block_threads) { return block_threads - producer_only_threads(m); }

// Whether the code being compiled can use mechanism m: false only for 'tma' in a device pass
// below sm_90 (bulk copies and mbarrier transaction counts are sm_90 instructions). A kernel
// templated on its mechanism may begin with
//   if constexpr (!mechanism_in_this_pass(M)) { __trap(); return; }
// so that such a pass compiles it as a trap and drops the rest of its body as dead code; whoever
// launches it must then know that the code the device runs was compiled for sm_90 or newer (cupipe's
// launchers check DeviceInfo::code_sm before any launch). Host passes say true.
constexpr bool mechanism_in_this_pass(Mechanism m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  return m != Mechanism::Tma;
#else
  static_cast<void>(m);
  return true;
#endif
}

inline const char* mechanism_name(Mechanism m) {
  switch (m) {
    case Mechanism::Sync: return "sync";
    case Mechanism::Pipeline: return "pipeline";
    case Mechanism::PipelineThread: return "pipeline_thread";
    case Mechanism::Primitives: return "primitives";
    case Mechanism::Cg: return "cg";
    case Mechanism::Barrier: return "barrier";
    case Mechanism::Specialized: return "specialized";
    case Mechanism::Tma: return "tma";
  }
  return "?";
}

}  // namespace engine
}  // namespace cupipe
