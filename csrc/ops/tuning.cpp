#include "ops/tuning.h"

namespace cupipe {
namespace ops {

namespace {

CopyConfig apply_explicit(CopyConfig best, MechanismArg mech, int64_t stages, int64_t vec_bytes) {
  const CopyConfig table = best;
  if (!mech.is_auto) best.mechanism = mech.mechanism;
  if (stages > 0) best.stages = static_cast<int>(stages);
  if (vec_bytes > 0) best.vec_bytes = static_cast<int>(vec_bytes);
  // The grid policy was measured with the table's mechanism and stages only.
  if (best.mechanism != table.mechanism || best.stages != table.stages) best.tiles_per_block = 0;
  return best;
}

}  // namespace

// stream_copy, 2^28 fp32 on an H200, grids of short-lived blocks of two 8 KiB tiles (see
// stream_copy.cuh; BENCHMARKS.md, 2026-11-23, eighth run, scripts/copy_tile_sweep.py): sync with
// one stage 0.994x of y.copy_(x), sync/2 0.980x, pipeline/1 0.980x, the other mechanisms
// 0.965-0.975x. With two tiles per block a second stage only adds the wait for a ring of two; the
// plain loads of sync already keep enough bytes in flight with the whole device's occupancy.
// (Since the seventeenth run sync with one stage copies one 16 KiB tile per block: 0.998x of
// cudaMemcpyAsync in scripts/probe_stream_copy.cu, see stream_copy.cuh.)
// Older GPUs take the LDGSTS path, which needs no Hopper instructions (not measured there).
CopyConfig resolve_stream_copy(const DeviceInfo& dev, MechanismArg mech, int64_t stages,
                               int64_t vec_bytes, int64_t /*bytes*/) {
  CopyConfig best;
  if (dev.code_sm >= 90) {
    best.mechanism = engine::Mechanism::Sync;
    best.stages = 1;
  } else {
    best.mechanism = engine::Mechanism::Primitives;
    best.stages = 2;
  }
  best.vec_bytes = 16;
  return apply_explicit(best, mech, stages, vec_bytes);
}

// Stencils on sm_90, from the H200 sweeps of scripts/stencil_sweep.py with the fixed consumers
// (BENCHMARKS.md, fourth run, 2026-11-23; two sweeps in one run, ms):
//   along the last dim only (ry == 0: 1-D signals, 1 x k windows; the Row kernel):
//     fp32 2^28 r=4: barrier/2 0.681, 0.621; specialized/2 0.701, 0.661; primitives/2 0.815, 0.764
//     fp16 2^28 r=4: specialized/2 0.430, 0.406; barrier/2 0.537, 0.462; primitives/2 0.561, 0.517
//     (fifth run, queued timing: fp32 barrier/2 0.577, specialized/2 0.588, primitives/2 0.601;
//     fp16 specialized/2 0.334, barrier/2 0.379, primitives/2 0.415)
//     2-byte signals since the twenty-second run (the fixed consumer's 16-byte items, 32 KiB
//     tiles; 2026-11-25, scripts/stencil_sweep.py, ms, fp16 / bf16, copy_ 0.258): tma/2 0.299 /
//     0.300, barrier/2 0.302 / 0.303, specialized/2 0.307 / 0.306, primitives/2 0.313 / 0.313
//     (before: 8-byte items in 16 KiB tiles, specialized/2 0.340 / 0.346 in the same session).
//     Batches of short rows (many rows per tile, one bulk copy per row, as under fp32's barrier)
//     were not measured.
//   2-D boxes (both radii > 0), fp32 8192^2: since interior tiles skip fill_stage (fifth run,
//   2026-11-23, queued timing) primitives/2 leads: 3x3 0.157 vs specialized/2 0.169, 5-point
//   0.151 vs 0.164, 5x5 0.156 vs 0.190, 9x9 0.379 vs 0.401 (the loader got cheaper; under
//   specialized one producer warp runs it for the whole block). Before that change specialized/2
//   led: 5-point 0.181 vs 0.202, 5x5 0.233 vs 0.278.
//   2-D fp16 3x3: primitives/2 0.127 vs specialized/2 0.205 (the 2-byte window is half the bytes
//   for the same consumer work, and one producer warp's copies do not keep up).
// barrier's rows are 16-byte aligned copies here, libcu++'s bulk path (synccheck-clean). fp64
// follows fp32 (4- and 8-byte types share the 16-byte consumer vectors). Stencils along a strided
// dim (rx == 0), 2-D stencils and older GPUs: primitives, 2 stages.
// Grids (sixth run, scripts/grid_sweep.py, two device calls, w = blocks / SMs, one wave of
// persistent blocks as w = 0): fp32 1-D r=4 barrier/2 0.571 ms at one wave, 0.558 at
// w = 32, 0.543 at w = 128 (~2 tiles per block; 0.890 -> 0.936x of copy_); fp32 3x3 and 5-point
// primitives/2 0.151-0.152 at one wave, 0.145-0.147 at w = 32 (~2 tiles per block), slower again
// at w = 48 and up (0.155-0.162). Persistent stayed fastest for 5x5 (0.153 against 0.165 at
// w = 32), 9x9, the 2-byte types (2-D 3x3 0.108-0.110 against 0.126) and 1-D pipeline/4: those
// keep one wave. A persistent block ends on a partial round of tiles (8192 tiles on 264 blocks:
// 8 blocks run a 32nd tile while the rest wait); blocks of two tiles let the scheduler fill SMs
// as they free up.
// tma's tensor-map tiles (sixth run, scripts/stencil_sweep.py; a 2-D tile is one box, its
// out-of-plane part zero-filled by the copy engine, no per-thread address arithmetic): fp16 3x3
// 8192^2 tma/2 0.083 ms against primitives/2's 0.112 (0.60 -> 0.81x of copy_), fp32 9x9 0.344
// against 0.380; fp32 3x3 0.153-0.157 against 0.151 and 5x5 0.153-0.169 against 0.159 (no
// change worth a switch). Only where the box applies (rows16: rows of whole 16-byte multiples
// from an aligned pointer); elsewhere tma copies row by row, two times slower than primitives.
// The narrow kernels' 128-thread blocks (twelfth run, scripts/probe_stencil_blocks.cu, 8192^2
// fp32, ms, against cudaMemcpyAsync's 0.1286-0.1288): 3x3 (and the 5-point star) tma/2 with one
// tile per block 0.1416-0.1421 (0.91x), two 0.1427-0.1431, persistent 0.151, primitives/2 with two
// 0.1444-0.1446; 5x5 tma/2 with two tiles per block 0.1435 (0.90x), one 0.1474, four 0.1456,
// persistent 0.154, primitives/2 persistent 0.152. With the weights staged while the first tile
// loads (run_ring's ready hook): 3x3 one tile per block 0.1412-0.1413, 5x5 two 0.1424-0.1425 and
// one 0.1420 (a tie; two kept). In the suite (python -m cupipe.bench): 3x3 and 5-point 0.141 ms,
// 5x5 0.142. Where the tensor-map box does not apply (rows not whole 16-byte multiples) the
// general kernel runs, as before.
// fp16 and bf16 boxes of 5-9 tap rows at tma/2 run the narrow tensor-core kernels (one weight
// term for weights in x's dtype, fourteenth run; bf16 in two terms since the fifteenth), whose
// persistent blocks measured fastest there (scripts/probe_stencil_blocks.cu with PROBE_MMA=1,
// thirteenth run: fp16 5x5 0.0844 ms persistent against 0.103 with eight tiles per block and
// 0.100-0.102 at 3 or 4 stages); the 2-byte row of the table above stays.
CopyConfig resolve_stencil(const DeviceInfo& dev, MechanismArg mech, int64_t stages, const StencilGeometry& g) {
  CopyConfig best;
  best.mechanism = engine::Mechanism::Primitives;
  best.stages = 2;
  if (dev.code_sm >= 90 && g.rx > 0 && g.ry == 0)
    best.mechanism = g.esz == 2 ? engine::Mechanism::Tma : engine::Mechanism::Barrier;
  if (dev.code_sm >= 90 && g.esz == 4 && ((g.ry == 0 && g.rx > 0) || (g.ry == 1 && g.rx == 1))) best.tiles_per_block = 2;
  if (dev.code_sm >= 90 && g.ry > 0 && g.rx > 0 && g.rows16) {
    if (g.esz == 2 || (g.esz == 4 && g.rx > 2)) {
      best.mechanism = engine::Mechanism::Tma;
      // The 2-byte 3x3 (and 5-point) narrow kernel: 32 x 256 tiles, one per block (stencil.cuh's
      // narrow_wide_tiles: fp16 0.0765 ms against 0.080 persistent, twenty-fourth run).
      best.tiles_per_block = g.esz == 2 && g.rx == 1 && g.ry == 1 ? 1 : 0;
    } else if (g.esz == 4 && g.ry == g.rx) {  // 3x3 and 5x5: the narrow kernels
      best.mechanism = engine::Mechanism::Tma;
      best.tiles_per_block = g.rx == 1 ? 1 : 2;
    }
  }
  return apply_explicit(best, mech, stages, 0);
}

// Reductions on an H200 (BENCHMARKS.md, 2026-11-22, third run; the stage-size sweep of
// scripts/profile_cases.py): along the innermost dim (whole tensor, short or long rows)
// primitives with 2 stages of 32 KiB led or tied every case (sum all 0.263 ms, rows (4194304, 64)
// 0.283, rows (8192, 32768) 0.257). Columns, since their chunks are up to 16 KiB wide (fifth
// run, scripts/reduce_sweep.py): primitives/2 with 64 KiB stages 0.251-0.253 ms, /4 with 32 KiB
// 0.264-0.269, /2 with 16 KiB 0.271-0.274 (they had run fastest at 4 stages of 16 KiB with
// 512-byte chunks). Older GPUs take the same LDGSTS path (sm_80+), not yet measured there.
// Rows of 4-32 KiB (a row or a few per 32 KiB stage, each row folded by several warps): one
// stage (2026-11-23, tenth run, scripts/reduce_grid_sweep.py, (4096, 4096) fp32 in 0.0206-0.0212
// ms against 2 stages' 0.0215-0.0232 over four runs, L2 warm or evicted): with a tile or two
// per block there is little to overlap within a block, and one stage fits twice the blocks.
// (Since the eighteenth run these rows take a block per tile of ~16 KiB, reduce_wide_rows_kernel
// in reduce.cuh, which has one stage whatever is asked; tma and primitives ran it alike.)
// The other innermost-dim reductions on sm_90+: tma with one 32 KiB stage (2026-11-24, fourteenth
// run, scripts/reduce_grid_sweep.py, two rounds in one call, ms, against primitives/2): sum all
// 2^28 fp32 0.2428-0.2429 against 0.2444-0.2449, rows (4194304, 64) 0.2595-0.2598 against
// 0.2634-0.2647, amax all 0.2454 against 0.2481-0.2482, bf16 -> fp32 all 0.1264 against
// 0.1283-0.1284, rows (8192, 32768) 0.2387-0.2388 against 0.2388-0.2389; the tenth run's sweep
// had the same order (sum all 0.2379 against 0.2393). (Why, not measured: one bulk copy per tile,
// issued by one thread, leaves the block's threads to the fold.) Rows over 64 KiB take 64 KiB
// stages under tma/1 (rows_tile_bytes in reduce.cuh, sixteenth run); tma/2 and tma/3 at 16-64
// KiB, and primitives/2, stayed behind tma/1 on every row case (scripts/probe_reduce_split.cu).
// (Since the nineteenth run, long rows fewer than the resident blocks at one stage, the whole
// tensor among them, take a block per 64 KiB chunk and a partials pass: chunked_rows in
// reduce.cuh; tma/1 sum all 0.2374 -> 0.2367 ms, bf16 0.1233 -> 0.1227, rows (64, 2^22) 0.2378
// -> 0.2360.)
// Columns: primitives/2, and on sm_90+ for rows of 4 KiB or more, a multiple of 128 bytes (the
// tiles' congruent layout, reduce.cuh), tma with three 64 KiB stages: (32768, 8192) fp32 0.2452
// ms against primitives/2's 0.2488-0.2489, primitives/3 0.2459-0.2465, tma/2 0.2468-0.2474 (H200,
// 2026-11-24, twentieth run, scripts/probe_reduce_cols.cu, two rounds). Before that layout (a
// tile's rows 32 bytes off their sources' lines) tma/2 ran even with primitives/2 and tma/1 and
// tma/3 slower; the narrower rows' one bulk copy per row of a few hundred bytes is not measured.
CopyConfig resolve_reduce(const DeviceInfo& dev, MechanismArg mech, int64_t stages, int64_t /*outer*/,
                          int64_t r, int64_t inner, int esz) {
  CopyConfig best;
  best.mechanism = engine::Mechanism::Primitives;
  best.stages = 2;
  const int64_t row_bytes = r * esz;
  const int64_t col_row_bytes = inner * esz;
  if (inner > 1) {
    if (dev.code_sm >= 90 && col_row_bytes >= 4096 && col_row_bytes % 128 == 0) {
      best.mechanism = engine::Mechanism::Tma;
      best.stages = 3;
    }
  } else if (row_bytes > 4096 && row_bytes <= 32768) {
    best.stages = 1;
  } else if (dev.code_sm >= 90) {
    best.mechanism = engine::Mechanism::Tma;
    best.stages = 1;
  }
  return apply_explicit(best, mech, stages, 0);
}

}  // namespace ops
}  // namespace cupipe
