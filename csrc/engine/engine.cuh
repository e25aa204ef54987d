// cupipe's async copy engine, header-only. Include this from a .cu file:
//
//   #include "engine/engine.cuh"     // with cupipe.include_dir() on the include path
//
//   template <Mechanism M, int S, int V>
//   __global__ void k(...) {
//     extern __shared__ __align__(128) char smem[];
//     __shared__ RawShared<typename Ring<M, S, V>::SharedState> ss;
//     Ring<M, S, V> ring(ss.get(), smem, stage_bytes);
//     run_ring(ring, ntiles, load, consume);
//   }
//
// See rings.cuh for the mechanisms and their verbs, stage_ring.cuh for the drivers.
#pragma once

#include "engine/common.cuh"
#include "engine/mbarrier.cuh"
#include "engine/mechanism.h"
#include "engine/rings.cuh"
#include "engine/stage_ring.cuh"
