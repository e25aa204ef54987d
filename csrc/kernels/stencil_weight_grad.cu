// The weight gradient's launcher: the kernel and how it works are in stencil/weight_grad.cuh.
#include "kernels/stencil.cuh"
#include "kernels/stencil/weight_grad.cuh"

namespace cupipe {
namespace kernels {
namespace {

template <typename T>
int64_t launch_wgrad_dtype(const StencilWeightGradParams& wp) {
  using A = acc_t<T>;
  const DeviceInfo dev = device_info(current_device());
  // The forward's geometry (tiles, window layout, blocking), fitted next to the warps' partials:
  // their size is bounded by the padded window (kh_pad <= kh + 2, kw_pad <= kw + 8).
  StencilParams p;
  p.batch = wp.batch; p.ny = wp.ny; p.nx = wp.nx; p.ry = wp.ry; p.rx = wp.rx;
  p.stages = kWgradStages;
  const int64_t kh = 2 * int64_t(wp.ry) + 1, kw = 2 * int64_t(wp.rx) + 1;
  const int64_t rows_bound = int64_t(kWgradWarps) * (kh + 2) * (kw + 8) * int64_t(sizeof(A));
  StencilGeom g = make_stencil_geom(p, sizeof(T), sizeof(A), kStencilThreads, dev.max_smem_optin - 1024 - rows_bound);
  int64_t grid = 0;
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(wp.stream);
  auto launch = [&](const char* blocking) {
    const auto kernel = kernel_ref<const T*, const T*, A*, StencilGeom, Boundary>(
        kStencilWgradHeader, kernel_id("stencil_wgrad_kernel", type_c<T>{}, blocking), stream);
    const size_t smem = static_cast<size_t>(kWgradStages) * g.stage_bytes +
                        static_cast<size_t>(kWgradWarps) * g.kh_pad * g.kw_pad * sizeof(A);
    prepare_smem(kernel, smem, "stencil weight gradient");
    grid = static_cast<int64_t>(dev.num_sms) * blocks_per_sm(kernel, kStencilThreads, smem);
    grid = std::max<int64_t>(1, std::min({grid, g.ntiles, wp.max_blocks}));
    set_block_tiles(g, grid);
    launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(kStencilThreads), smem, stream, false,
                  static_cast<const T*>(wp.x), static_cast<const T*>(wp.grad), static_cast<A*>(wp.partials), g,
                  wp.boundary);
  };
  switch (g.blocking) {
    case StencilBlocking::Row: launch("RowBlocking"); break;
    case StencilBlocking::Box1: launch("BoxBlocking<1>"); break;
    case StencilBlocking::Box3: launch("BoxBlocking<3>"); break;
    case StencilBlocking::Box5: launch("BoxBlocking<5>"); break;
    case StencilBlocking::Box9: launch("BoxBlocking<9>"); break;
  }
  return grid;
}

}  // namespace
}  // namespace kernels

int64_t launch_stencil_weight_grad(const StencilWeightGradParams& p) {
  if (p.batch * p.ny * p.nx == 0) return 0;
  int64_t blocks = 0;
  kernels::dispatch_dtype(p.dtype, [&](auto tv) { blocks = kernels::launch_wgrad_dtype<decltype(tv)>(p); });
  return blocks;
}

}  // namespace cupipe
