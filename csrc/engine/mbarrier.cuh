// Hopper (sm_90) mbarrier and bulk-copy wrappers: the completion mechanism behind `tma`.
// On older targets these compile to traps; the host never launches them there.
#pragma once

#include <cstdint>

#include "engine/common.cuh"

namespace cupipe {
namespace engine {
namespace sm90 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CUPIPE_SM90 1
#else
#define CUPIPE_SM90 0
#endif

CUPIPE_DEVICE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

CUPIPE_DEVICE void mbarrier_init(uint64_t* bar, uint32_t count) {
#if CUPIPE_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
#else
  __trap();
#endif
}

// Makes barrier initialisation visible to the async proxy (the copy engine) and other threads.
CUPIPE_DEVICE void fence_barrier_init() {
#if CUPIPE_SM90
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Orders this thread's earlier generic-proxy shared-memory accesses before later async-proxy
// ones (bulk copies into the same bytes); a barrier then publishes that to the copying thread.
CUPIPE_DEVICE void fence_proxy_async_shared() {
#if CUPIPE_SM90
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Adds `bytes` to the transaction count the current phase waits for.
CUPIPE_DEVICE void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
#if CUPIPE_SM90
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

CUPIPE_DEVICE void mbarrier_arrive(uint64_t* bar) {
#if CUPIPE_SM90
  asm volatile(
      "{\n\t.reg .b64 st;\n\t"
      "mbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n\t}" ::"r"(smem_addr(bar))
      : "memory");
#else
  __trap();
#endif
}

// Blocks until the phase with parity `parity` has completed.
CUPIPE_DEVICE void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
#if CUPIPE_SM90
  asm volatile(
      "{\n\t.reg .pred p;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra WAIT_%=;\n\t}" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#else
  __trap();
#endif
}

// One bulk copy global -> shared (UBLKCP) completing on `bar` with `bytes` of transactions.
// dst and src 16-byte aligned, bytes a multiple of 16.
CUPIPE_DEVICE void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if CUPIPE_SM90
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
#else
  __trap();
#endif
}

// One box of a 3-D tensor map global -> shared (UTMALDG), completing on `bar` with the box's
// bytes of transactions; box elements outside the tensor arrive as zeros. `tmap` is the generic
// address of a CUtensorMap in kernel-parameter (__grid_constant__), constant or global memory;
// dst 128-byte aligned; coordinates in elements, innermost first, and may be negative.
CUPIPE_DEVICE void tensor_copy_3d_g2s(void* dst, const void* tmap, int c0, int c1, int c2, uint64_t* bar) {
#if CUPIPE_SM90
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(smem_addr(dst)),
      "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
#else
  __trap();
#endif
}

// One bulk copy shared -> global (UBLKCP in the store direction), tracked by this thread's bulk
// async-group: close the group with bulk_commit_group, and before the shared source is written
// again wait for its reads with bulk_wait_group_read. dst and src 16-byte aligned, bytes a
// multiple of 16.
CUPIPE_DEVICE void bulk_copy_s2g(void* dst, const void* src, uint32_t bytes) {
#if CUPIPE_SM90
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(src)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

CUPIPE_DEVICE void bulk_commit_group() {
#if CUPIPE_SM90
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#else
  __trap();
#endif
}

// Blocks until at most N of this thread's bulk groups still read their shared-memory sources.
template <int N>
CUPIPE_DEVICE void bulk_wait_group_read() {
#if CUPIPE_SM90
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

}  // namespace sm90
}  // namespace engine
}  // namespace cupipe
