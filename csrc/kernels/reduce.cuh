// Pipelined reductions of a contiguous (outer, r, inner) view over r, on the engine, by job:
//   reduce/combine.cuh      the ops' combines, the folds of vectors and spans, the team combine
//   reduce/rows.cuh         RowsPlan, reduce_rows_kernel (packed, split) and reduce_wide_rows_kernel
//   reduce/columns.cuh      ColsPlan and reduce_cols_kernel (the ring)
//   reduce/columns_direct.cuh ColsDirectPlan and reduce_cols_direct_kernel (sync: plain loads)
//   reduce/partials.cuh     the partials pass: split reductions' partials combined in order
//   reduce/states.h         var/std, argmax/argmin, logsumexp, norm as states (host and device)
//   reduce/stateful.cuh     StatePlan, reduce_state_kernel (every layout) and its partials pass
//   reduce/state_launch.cuh the state reductions' plans, workspace and launcher (reduce_state.cu)
//   reduce/launch_plan.cuh  stage sizes, the plans, the workspace size and the launchers
//
//   rows  (inner == 1):  short rows are packed several to a tile and reduced by lane groups of
//                        2..32 threads with shuffles; long rows are split into `parts`, one block
//                        streaming each part's tiles through the ring.
//   cols  (inner > 1):   a tile is tile_rows rows of a chunk of contiguous columns (32 to 256
//                        16-byte vectors wide), moved as one 2-D box; thread t owns the chunk's
//                        vector t % width, groups of threads take interleaved rows and combine
//                        in smem.
//
// Determinism: every partial is combined in a fixed order (per-thread sequential, then fixed
// shuffle / smem trees); a row split into several parts writes its partials to the workspace
// and a second kernel combines them in order. No floating-point atomics anywhere.
// docs/design.md ("Reductions") says when each plan runs and why.
#pragma once

#include "kernels/reduce/launch_plan.cuh"
