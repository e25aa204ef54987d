// Build and run (H100/H200): nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/probe_copy tools/probes/probe_copy_bandwidth.cu && /tmp/probe_copy
//   args: [log2 elements = 28] [reps = 30]; PROBE_RINGS=1 adds the bulk-copy ring grid.
// What a device-wide copy (and a read-only pass) reaches on this GPU without cupipe: the ceiling
// stream_copy and the reductions are measured against, and why stream_copy runs short-lived
// blocks of a few tiles rather than a persistent grid. Plain register copies (16-byte vectors, as
// an elementwise kernel; cache-streaming variants), cudaMemcpyAsync, copies staged through shared
// memory (persistent grids against a tile or a run of tiles per block), and a cp.async.bulk ring
// over stage counts, stage sizes, blocks per SM and L2 hints. Median of queued repetitions.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "probe_common.cuh"

__global__ void fill_random(uint32_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = 0x3f800000u | (h & 0x7fffffu);  // floats in [1, 2)
  }
}

// ------------------------------------------------------------------ plain copies through registers

template <int U, bool Stream>
__global__ void __launch_bounds__(256) copy_plain(const float4* __restrict__ s, float4* __restrict__ d, int64_t n) {
  const int64_t base = (blockIdx.x * int64_t(blockDim.x)) * U + threadIdx.x;
  float4 v[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = base + u * int64_t(blockDim.x);
    if (i < n) v[u] = Stream ? __ldcs(s + i) : s[i];
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = base + u * int64_t(blockDim.x);
    if (i < n) {
      if (Stream) __stcs(d + i, v[u]);
      else d[i] = v[u];
    }
  }
}

// ------------------------------------------------------------------ read-only pass (a sum)

// ------------------------------------------------------------------ bulk-copy ring

__device__ __forceinline__ uint32_t sa(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Hint: 0 none, 1 evict_first on the loads, 2 evict_first on loads and stores.
template <int Hint>
__global__ void __launch_bounds__(32) copy_bulk_ring(const char* __restrict__ src, char* __restrict__ dst,
                                                     int64_t ntiles, int tile, int stages) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t bars[16];
  if (threadIdx.x != 0) return;
  uint64_t pol = 0;
  if (Hint > 0) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  for (int s = 0; s < stages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&bars[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const int64_t mine = blockIdx.x < ntiles ? (ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto load = [&](int64_t k) {
    const int s = static_cast<int>(k % stages);
    const char* g = src + (blockIdx.x + k * gridDim.x) * int64_t(tile);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&bars[s])), "r"(tile) : "memory");
    if (Hint > 0)
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
              sa(smem + s * tile)),
          "l"(g), "r"(tile), "r"(sa(&bars[s])), "l"(pol)
          : "memory");
    else
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       sa(smem + s * tile)),
                   "l"(g), "r"(tile), "r"(sa(&bars[s]))
                   : "memory");
  };
  for (int64_t k = 0; k < stages && k < mine; ++k) load(k);
  for (int64_t k = 0; k < mine; ++k) {
    const int s = static_cast<int>(k % stages);
    const uint32_t parity = static_cast<uint32_t>((k / stages) & 1);
    asm volatile(
        "{\n\t.reg .pred p;\nW_%=:\n\tmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n\t@!p bra W_%=;\n\t}" ::"r"(
            sa(&bars[s])),
        "r"(parity)
        : "memory");
    char* g = dst + (blockIdx.x + k * gridDim.x) * int64_t(tile);
    if (Hint > 1)
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(g),
                   "r"(sa(smem + s * tile)), "r"(tile), "l"(pol)
                   : "memory");
    else
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(g), "r"(sa(smem + s * tile)),
                   "r"(tile)
                   : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // Refill the stage of the previous tile once its store has read it (all groups but the newest).
    if (k >= 1 && k - 1 + stages < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(k - 1 + stages);
    }
  }
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}


// ------------------------------------------------------------------ copies staged through shared memory

// One tile of 256 x U 16-byte vectors per block round: loaded into shared memory (LDG + STS, or
// LDGSTS when Async), a barrier, then stored from shared memory by another thread than the one
// that loaded it (the staging is real). Grid-stride over tiles: a grid of ntiles blocks is one
// tile per block, like an elementwise kernel.
template <int U, bool Async>
__global__ void __launch_bounds__(256) copy_staged(const float4* __restrict__ s, float4* __restrict__ d, int64_t ntiles) {
  __shared__ float4 buf[256 * U];
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const float4* src = s + t * 256 * U;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = u * 256 + threadIdx.x;
      if (Async) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(buf + i))),
                     "l"(src + i) : "memory");
      } else {
        buf[i] = src[i];
      }
    }
    if (Async) asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = u * 256 + (threadIdx.x ^ 32);
      d[t * 256 * U + i] = buf[i];
    }
    __syncthreads();
  }
}

// The same staging with a run of `per` consecutive tiles per block (tiles b * per ... b * per +
// per - 1) instead of tiles gridDim.x apart: one address window for the whole grid, not `per`.
// Own: each thread stores what it loaded (no barrier needed between the halves, kept anyway).
template <int U, bool Own>
__global__ void __launch_bounds__(256) copy_staged_runs(const float4* __restrict__ s, float4* __restrict__ d,
                                                        int64_t ntiles, int per) {
  __shared__ float4 buf[256 * U];
  for (int64_t t = blockIdx.x * int64_t(per); t < min(ntiles, (blockIdx.x + 1) * int64_t(per)); ++t) {
    const float4* src = s + t * 256 * U;
#pragma unroll
    for (int u = 0; u < U; ++u) buf[u * 256 + threadIdx.x] = src[u * 256 + threadIdx.x];
    __syncthreads();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = u * 256 + (Own ? threadIdx.x : (threadIdx.x ^ 32));
      d[t * 256 * U + i] = buf[i];
    }
    __syncthreads();
  }
}

// One bulk tile per block and round (one thread: global -> shared on an mbarrier, shared -> global).
__global__ void __launch_bounds__(32) copy_bulk_single(const char* __restrict__ src, char* __restrict__ dst,
                                                       int64_t ntiles, int tile) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t bar;
  if (threadIdx.x != 0) return;
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&bar)));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  uint32_t parity = 0;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x, parity ^= 1) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&bar)), "r"(tile) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(smem)),
                 "l"(src + t * tile), "r"(tile), "r"(sa(&bar))
                 : "memory");
    asm volatile(
        "{\n\t.reg .pred p;\nW_%=:\n\tmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n\t@!p bra W_%=;\n\t}" ::"r"(
            sa(&bar)),
        "r"(parity)
        : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + t * tile), "r"(sa(smem)),
                 "r"(tile)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

// ------------------------------------------------------------------ timing

int main(int argc, char** argv) {
  const int lg = argc > 1 ? std::atoi(argv[1]) : 28;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 30;
  const int64_t n = int64_t(1) << lg, bytes = n * 4, n4 = n / 4;
  int dev = 0, sms = 0;
  PROBE_CHECK(cudaGetDevice(&dev));
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  PROBE_CHECK(cudaGetDeviceProperties(&prop, dev));
  float *s = nullptr, *d = nullptr, *part = nullptr;
  PROBE_CHECK(cudaMalloc(&s, bytes));
  PROBE_CHECK(cudaMalloc(&d, bytes));
  PROBE_CHECK(cudaMalloc(&part, 1 << 22));
  fill_random<<<4 * sms, 256>>>(reinterpret_cast<uint32_t*>(s), n, 12345u);
  PROBE_CHECK(cudaDeviceSynchronize());
  std::printf("device %s, %d SMs; %lld fp32 elements (%.2f GB copy traffic), median of %d\n", prop.name, sms,
              static_cast<long long>(n), 2.0 * bytes / 1e9, reps);
  const float4* s4 = reinterpret_cast<const float4*>(s);
  float4* d4 = reinterpret_cast<float4*>(d);

  auto verify = [&](const char* name) {
    std::vector<uint32_t> a(4096), b(4096);
    for (int64_t off : {int64_t(0), n / 2, n - 4096}) {
      PROBE_CHECK(cudaMemcpy(a.data(), s + off, 4096 * 4, cudaMemcpyDeviceToHost));
      PROBE_CHECK(cudaMemcpy(b.data(), d + off, 4096 * 4, cudaMemcpyDeviceToHost));
      if (a != b) {
        std::printf("MISMATCH %s at %lld\n", name, static_cast<long long>(off));
        std::exit(2);
      }
    }
  };
  double ref = 0;
  auto report = [&](const std::string& name, float ms, double traffic) {
    const double gbs = traffic / (ms * 1e-3) / 1e9;
    if (ref == 0) ref = ms;
    std::printf("%-44s %8.4f ms %8.0f GB/s  %.3fx first\n", name.c_str(), ms, gbs, ref / ms);
  };
  auto run_copy = [&](const std::string& name, const std::function<void()>& f) {
    PROBE_CHECK(cudaMemset(d, 0xff, bytes));
    const float ms = probe_median_ms(f, reps);
    verify(name.c_str());
    report(name, ms, 2.0 * bytes);
  };

  run_copy("cudaMemcpyAsync", [&] { PROBE_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice)); });
  run_copy("plain 1x16B/thread", [&] { copy_plain<1, false><<<(n4 + 255) / 256, 256>>>(s4, d4, n4); });
  run_copy("plain 2x16B/thread", [&] { copy_plain<2, false><<<(n4 + 511) / 512, 256>>>(s4, d4, n4); });
  run_copy("plain 4x16B/thread", [&] { copy_plain<4, false><<<(n4 + 1023) / 1024, 256>>>(s4, d4, n4); });
  run_copy("plain 1x16B/thread, ld.cs/st.cs", [&] { copy_plain<1, true><<<(n4 + 255) / 256, 256>>>(s4, d4, n4); });
  run_copy("plain 2x16B/thread, ld.cs/st.cs", [&] { copy_plain<2, true><<<(n4 + 511) / 512, 256>>>(s4, d4, n4); });

  for (int per : {1, 2, 4, 0}) {  // tiles per block; 0: a persistent grid of 8 blocks per SM
    auto grid = [&](int64_t ntiles) { return per ? (ntiles + per - 1) / per : int64_t(sms) * 8; };
    const char* pn = per == 1 ? "1 tile/blk" : per == 2 ? "2 tiles/blk" : per == 4 ? "4 tiles/blk" : "persistent";
    run_copy(std::string("staged LDG/STS 4K, ") + pn, [&] { copy_staged<1, false><<<grid(n4 / 256), 256>>>(s4, d4, n4 / 256); });
    run_copy(std::string("staged LDG/STS 8K, ") + pn, [&] { copy_staged<2, false><<<grid(n4 / 512), 256>>>(s4, d4, n4 / 512); });
    run_copy(std::string("staged LDGSTS 4K, ") + pn, [&] { copy_staged<1, true><<<grid(n4 / 256), 256>>>(s4, d4, n4 / 256); });
    run_copy(std::string("staged LDGSTS 8K, ") + pn, [&] { copy_staged<2, true><<<grid(n4 / 512), 256>>>(s4, d4, n4 / 512); });
    for (int tile : {2048, 4096, 8192}) {
      PROBE_CHECK(cudaFuncSetAttribute(copy_bulk_single, cudaFuncAttributeMaxDynamicSharedMemorySize, tile));
      const int64_t nt = bytes / tile;
      const int64_t g = per ? grid(nt) : int64_t(sms) * 32;
      char name[96];
      std::snprintf(name, sizeof name, "bulk single %dK, %s", tile / 1024, per ? pn : "persistent (32/SM)");
      run_copy(name, [&] { copy_bulk_single<<<g, 32, tile>>>(reinterpret_cast<const char*>(s), reinterpret_cast<char*>(d), nt, tile); });
    }
  }
  for (int per : {1, 2, 4}) {
    char name[96];
    std::snprintf(name, sizeof name, "staged LDG/STS 8K, runs of %d", per);
    run_copy(name, [&] { copy_staged_runs<2, false><<<(n4 / 512 + per - 1) / per, 256>>>(s4, d4, n4 / 512, per); });
    std::snprintf(name, sizeof name, "staged LDG/STS 8K, runs of %d, own", per);
    run_copy(name, [&] { copy_staged_runs<2, true><<<(n4 / 512 + per - 1) / per, 256>>>(s4, d4, n4 / 512, per); });
    std::snprintf(name, sizeof name, "staged LDG/STS 4K, runs of %d", per);
    run_copy(name, [&] { copy_staged_runs<1, false><<<(n4 / 256 + per - 1) / per, 256>>>(s4, d4, n4 / 256, per); });
  }
  run_copy("cudaMemcpyAsync (again)", [&] { PROBE_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice)); });
  run_copy("plain 1x16B/thread (again)", [&] { copy_plain<1, false><<<(n4 + 255) / 256, 256>>>(s4, d4, n4); });
  if (std::getenv("PROBE_RINGS") != nullptr) {  // the bulk-copy ring over its whole grid
    for (int hint = 0; hint < 3; ++hint) {
      for (int tile : {8192, 16384, 32768}) {
        for (int stages : {2, 4, 8}) {
          for (int bps : {1, 2, 4, 8}) {
            const int64_t smem = int64_t(stages) * tile;
            if (smem * bps > 220 * 1024 || smem > 227 * 1024) continue;
            if (stages * tile * bps < 48 * 1024) continue;  // too few bytes in flight to matter
            auto k = hint == 0 ? copy_bulk_ring<0> : hint == 1 ? copy_bulk_ring<1> : copy_bulk_ring<2>;
            PROBE_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
            const int64_t ntiles = bytes / tile;
            const int grid = sms * bps;
            char name[128];
            std::snprintf(name, sizeof name, "bulk ring %s %2dK x%d, %d blk/SM",
                          hint == 0 ? "      " : hint == 1 ? "ef-ld " : "ef-all", tile / 1024, stages, bps);
            run_copy(name, [&] {
              k<<<grid, 32, smem>>>(reinterpret_cast<const char*>(s), reinterpret_cast<char*>(d), ntiles, tile, stages);
            });
          }
        }
      }
    }
  }

  std::printf("-- read only (sum), bytes read once\n");
  ref = 0;
  for (int u : {2, 4, 8}) {
    for (int bps : {4, 8}) {
      for (int stream = 0; stream < 2; ++stream) {
        auto k = u == 2 ? (stream ? sum_plain<2, true> : sum_plain<2, false>)
                 : u == 4 ? (stream ? sum_plain<4, true> : sum_plain<4, false>)
                          : (stream ? sum_plain<8, true> : sum_plain<8, false>);
        char name[128];
        std::snprintf(name, sizeof name, "sum %dx16B/thread, %d blk/SM%s", u, bps, stream ? ", ld.cs" : "");
        const float ms = probe_median_ms([&] { k<<<sms * bps, 256>>>(s4, part, n4); }, reps);
        report(name, ms, double(bytes));
      }
    }
  }
  PROBE_CHECK(cudaFree(s));
  PROBE_CHECK(cudaFree(d));
  PROBE_CHECK(cudaFree(part));
  return 0;
}
