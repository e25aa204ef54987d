// CPU kernels for every op: plain C++ loops parallelised with at::parallel_for. They are the
// portable path (and what CI tests), so they favour clarity over speed, but never call ATen's
// own conv or reduction kernels.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/reduce/states.h"
#include "ops/args.h"
#include "ops/boundary.h"

namespace cupipe {
namespace ops {
namespace {

at::Tensor stream_copy_cpu(const at::Tensor& x, c10::string_view mechanism, int64_t stages,
                           int64_t vec_bytes) {
  parse_mechanism("stream_copy", mechanism);  // validated for parity with CUDA; unused on CPU
  check_stages("stream_copy", stages);
  check_vec_bytes("stream_copy", vec_bytes);
  const at::Tensor src = x.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t bytes = src.numel() * static_cast<int64_t>(src.element_size());
  const char* s = static_cast<const char*>(src.data_ptr());
  char* d = static_cast<char*>(out.data_ptr());
  at::parallel_for(0, bytes, 1 << 16, [&](int64_t b, int64_t e) {
    std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
  });
  return out;
}

template <typename T, typename Acc>
void stencil_cpu_impl(const T* x, T* out, const Acc* w, const StencilGeometry& g, Boundary b) {
  const int64_t ny = g.ny, nx = g.nx;
  const int64_t xs_row = g.xs_row ? g.xs_row : nx, xs_plane = g.xs_row ? g.xs_plane : ny * nx;  // (pitched x)
  const int kw = 2 * g.rx + 1;
  const int64_t step = g.step, npts = nx / step;  // taps step elements apart (a batch dim inside rows)
  at::parallel_for(0, g.batch * ny, 16, [&](int64_t row0, int64_t row1) {
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t bi = row / ny, i = row % ny;
      const T* plane = x + bi * xs_plane;
      T* orow = out + row * nx;
      for (int64_t j = 0; j < nx; ++j) {
        Acc acc = 0;
        for (int a = -g.ry; a <= g.ry; ++a) {
          const int64_t yi = map_index(i + a, ny, b);
          if (yi < 0) continue;
          const T* xrow = plane + yi * xs_row;
          const Acc* wrow = w + static_cast<int64_t>(a + g.ry) * kw;
          for (int c = -g.rx; c <= g.rx; ++c) {
            const int64_t xj = map_stepped(j + c * step, npts, step, b);
            if (xj < 0) continue;
            acc += wrow[c + g.rx] * static_cast<Acc>(xrow[xj]);
          }
        }
        orow[j] = static_cast<T>(acc);
      }
    }
  });
}

at::Tensor stencil_cpu(const at::Tensor& x, const at::Tensor& weights, const StencilGeometry& logical,
                       std::optional<int64_t> dim, Boundary boundary) {
  if (x.numel() == 0) return at::empty_like(x);
  // The layout planner's geometry, as on CUDA: the loops read x's memory in place where they can.
  const StencilGeometry g = stencil_memory_geometry(x, logical, dim);
  StencilTensors t = stencil_tensors(x, weights, g);
  const at::Tensor w = weights_for_kernel(x, t.w);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "stencil_cpu", [&] {
    using Acc = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    stencil_cpu_impl<scalar_t, Acc>(t.x.const_data_ptr<scalar_t>(), t.kout.mutable_data_ptr<scalar_t>(),
                                    w.const_data_ptr<Acc>(), g, boundary);
  });
  t.finish();
  return t.out;
}

at::Tensor stencil1d_cpu(const at::Tensor& x, const at::Tensor& weights, int64_t dim,
                         c10::string_view boundary, c10::string_view mechanism, int64_t stages, int64_t steps) {
  const Boundary b = check_stencil_knobs("stencil1d", boundary, mechanism, stages, steps).boundary;
  const StencilGeometry g = check_stencil1d(x, weights, dim, b);
  return repeat_steps(steps, x, [&](const at::Tensor& in) { return stencil_cpu(in, weights, g, dim, b); });
}

at::Tensor stencil2d_cpu(const at::Tensor& x, const at::Tensor& weights, c10::string_view boundary,
                         c10::string_view mechanism, int64_t stages, int64_t steps) {
  const Boundary b = check_stencil_knobs("stencil2d", boundary, mechanism, stages, steps).boundary;
  const StencilGeometry g = check_stencil2d(x, weights, b);
  return repeat_steps(steps, x, [&](const at::Tensor& in) { return stencil_cpu(in, weights, g, std::nullopt, b); });
}

// stencil3d over a contiguous (batch, nz, ny, nx) stack, one output row per work item.
template <typename T, typename Acc>
void stencil3d_cpu_impl(const T* x, T* out, const Acc* w, const Stencil3dGeometry& g, Boundary b) {
  const int64_t nz = g.nz, ny = g.ny, nx = g.nx;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1;
  at::parallel_for(0, g.batch * nz * ny, 16, [&](int64_t row0, int64_t row1) {
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t i = row % ny, k = row / ny % nz, bi = row / (ny * nz);
      const T* vol = x + bi * nz * ny * nx;
      T* orow = out + row * nx;
      for (int64_t j = 0; j < nx; ++j) {
        Acc acc = 0;
        for (int a = -g.rz; a <= g.rz; ++a) {
          const int64_t zi = map_index(k + a, nz, b);
          if (zi < 0) continue;
          for (int c = -g.ry; c <= g.ry; ++c) {
            const int64_t yi = map_index(i + c, ny, b);
            if (yi < 0) continue;
            const T* xrow = vol + (zi * ny + yi) * nx;
            const Acc* wrow = w + (static_cast<int64_t>(a + g.rz) * kh + (c + g.ry)) * kw;
            for (int e = -g.rx; e <= g.rx; ++e) {
              const int64_t xj = map_index(j + e, nx, b);
              if (xj >= 0) acc += wrow[e + g.rx] * static_cast<Acc>(xrow[xj]);
            }
          }
        }
        orow[j] = static_cast<T>(acc);
      }
    }
  });
}

at::Tensor stencil3d_cpu_step(const at::Tensor& x, const at::Tensor& weights, const Stencil3dGeometry& g, Boundary b) {
  at::Tensor out = at::empty_like(x);  // x's layout when x is dense, as the fake kernel says
  if (x.numel() == 0) return out;
  const at::Tensor xc = x.contiguous(), w = weights_for_kernel(x, weights);
  at::Tensor kout = out.is_contiguous() ? out : at::empty(x.sizes(), x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "stencil3d_cpu", [&] {
    using Acc = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    stencil3d_cpu_impl<scalar_t, Acc>(xc.const_data_ptr<scalar_t>(), kout.mutable_data_ptr<scalar_t>(),
                                      w.const_data_ptr<Acc>(), g, b);
  });
  if (!kout.is_same(out)) out.copy_(kout);
  return out;
}

at::Tensor stencil3d_cpu(const at::Tensor& x, const at::Tensor& weights, c10::string_view boundary,
                         c10::string_view mechanism, int64_t stages, int64_t steps) {
  const Boundary b = check_stencil_knobs("stencil3d", boundary, mechanism, stages, steps).boundary;
  const Stencil3dGeometry g = check_stencil3d(x, weights, b);
  return repeat_steps(steps, x, [&](const at::Tensor& in) { return stencil3d_cpu_step(in, weights, g, b); });
}

// Weight gradient: grad_w[a][c] = sum over outputs of grad * the input the tap read. Rows go in
// fixed chunks, each with its own partial sums, added in chunk order: the result does not depend
// on the thread count.
template <typename T, typename Acc>
void stencil_weight_grad_cpu_impl(const T* x, const T* grad, Acc* out, const StencilGeometry& g, Boundary b) {
  const int64_t ny = g.ny, nx = g.nx, rows = g.batch * ny;
  const int kh = 2 * g.ry + 1, kw = 2 * g.rx + 1, taps = kh * kw;
  constexpr int64_t kChunk = 16;
  const int64_t nchunks = (rows + kChunk - 1) / kChunk;
  std::vector<Acc> part(static_cast<size_t>(nchunks * taps), Acc(0));
  at::parallel_for(0, nchunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ci = c0; ci < c1; ++ci) {
      Acc* acc = part.data() + ci * taps;
      for (int64_t row = ci * kChunk; row < std::min(rows, (ci + 1) * kChunk); ++row) {
        const int64_t bi = row / ny, i = row % ny;
        const T* plane = x + bi * ny * nx;
        for (int64_t j = 0; j < nx; ++j) {
          const Acc gv = static_cast<Acc>(grad[row * nx + j]);
          for (int a = 0; a < kh; ++a) {
            const int64_t yi = map_index(i + a - g.ry, ny, b);
            if (yi < 0) continue;
            for (int c = 0; c < kw; ++c) {
              const int64_t xj = map_index(j + c - g.rx, nx, b);
              if (xj >= 0) acc[a * kw + c] += gv * static_cast<Acc>(plane[yi * nx + xj]);
            }
          }
        }
      }
    }
  });
  for (int t = 0; t < taps; ++t) {
    Acc s = 0;
    for (int64_t ci = 0; ci < nchunks; ++ci) s += part[static_cast<size_t>(ci * taps + t)];
    out[t] = s;
  }
}

at::Tensor stencil_weight_grad_cpu(const char* op, const at::Tensor& x, const at::Tensor& grad,
                                   const at::Tensor& weights, const StencilGeometry& g, Boundary boundary) {
  check_stencil_grad(op, x, grad);
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor out = at::zeros(weights.sizes(), x.options().dtype(acc));
  if (x.numel() == 0) return out;
  const at::Tensor xc = x.contiguous(), gc = grad.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "stencil_weight_grad_cpu", [&] {
    using Acc = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    stencil_weight_grad_cpu_impl<scalar_t, Acc>(xc.const_data_ptr<scalar_t>(), gc.const_data_ptr<scalar_t>(),
                                                out.mutable_data_ptr<Acc>(), g, boundary);
  });
  return out;
}

at::Tensor stencil1d_weight_grad_cpu(const at::Tensor& x, const at::Tensor& grad, const at::Tensor& weights,
                                     int64_t dim, c10::string_view boundary) {
  const Boundary b = parse_boundary("_stencil1d_weight_grad", boundary);
  const StencilGeometry g = check_stencil1d(x, weights, dim, b);
  return stencil_weight_grad_cpu("_stencil1d_weight_grad", x, grad, weights, g, b);
}

at::Tensor stencil2d_weight_grad_cpu(const at::Tensor& x, const at::Tensor& grad, const at::Tensor& weights,
                                     c10::string_view boundary) {
  const Boundary b = parse_boundary("_stencil2d_weight_grad", boundary);
  const StencilGeometry g = check_stencil2d(x, weights, b);
  return stencil_weight_grad_cpu("_stencil2d_weight_grad", x, grad, weights, g, b);
}

template <typename Acc>
struct ReduceCombine {
  ReduceOp op;
  Acc init() const {
    switch (op) {
      case ReduceOp::Amax: return -std::numeric_limits<Acc>::infinity();
      case ReduceOp::Amin: return std::numeric_limits<Acc>::infinity();
      default: return Acc(0);
    }
  }
  Acc operator()(Acc a, Acc v) const {
    switch (op) {
      // amax/amin propagate NaN, like torch: once the accumulator is NaN it stays NaN.
      case ReduceOp::Amax: return kernels::nan_max(a, v);
      case ReduceOp::Amin: return kernels::nan_min(a, v);
      default: return a + v;
    }
  }
};

// Sum of n strided values by pairwise (cascade) summation: sequential runs of kPairwiseBlock,
// combined as a binary tree. The rounding error grows with log2(n) instead of n, like torch's
// own CPU sum; a plain running fp32 sum stalls (e.g. 2^25 ones summed to 2^24).
constexpr int64_t kPairwiseBlock = 128;

template <typename T, typename Acc>
Acc pairwise_sum(const T* p, int64_t stride, int64_t n) {
  if (n <= kPairwiseBlock) {
    Acc acc = 0;
    for (int64_t k = 0; k < n; ++k) acc += static_cast<Acc>(p[k * stride]);
    return acc;
  }
  // split at a multiple of the block (so the leaves stay full blocks); 0 < half < n
  const int64_t half = (n / 2 + kPairwiseBlock - 1) / kPairwiseBlock * kPairwiseBlock;
  return pairwise_sum<T, Acc>(p, stride, half) + pairwise_sum<T, Acc>(p + half * stride, stride, n - half);
}

template <typename T, typename Acc, typename O>
void reduce_cpu_impl(const T* x, O* out, int64_t outer, int64_t r, int64_t inner, ReduceOp op) {
  const ReduceCombine<Acc> comb{op};
  at::parallel_for(0, outer * inner, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t oi = o / inner, ii = o % inner;
      const T* base = x + oi * r * inner + ii;
      Acc acc;
      if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
        acc = pairwise_sum<T, Acc>(base, inner, r);
      } else {
        acc = comb.init();
        for (int64_t k = 0; k < r; ++k) acc = comb(acc, static_cast<Acc>(base[k * inner]));
      }
      if (op == ReduceOp::Mean) acc = r > 0 ? acc / static_cast<Acc>(r) : std::numeric_limits<Acc>::quiet_NaN();
      out[o] = static_cast<O>(acc);
    }
  });
}

// The state reductions (var .. norm) in double (kernels/reduce/states.h: the GPU kernels'
// states). Each output's r elements are added in chunks of kStateChunk, one state a chunk (var's
// by two passes over the chunk), merged in chunk order: fixed by r alone, so the result is the same
// for any thread count. Many outputs run in parallel (columns in blocks that read rows
// contiguously); few long ones (a whole tensor) run their chunks in parallel.
constexpr int64_t kStateChunk = int64_t(1) << 15;

template <kernels::StateKind K, typename T, typename O>
void reduce_state_cpu_impl(const T* x, O* out, int64_t outer, int64_t r, int64_t inner, const kernels::StateCtx& c) {
  using St = kernels::State<double, K>;
  const int64_t nout = outer * inner, nchunk = std::max<int64_t>(1, (r + kStateChunk - 1) / kStateChunk);
  auto base_of = [&](int64_t o) { return x + (o / inner) * r * inner + o % inner; };
  // Moments add x - x[0] (states.h); the others add x.
  auto shift_of = [&](const T* base) {
    return K == kernels::StateKind::Moments && r > 0 ? static_cast<double>(base[0]) : 0.0;
  };
  auto chunk = [&](const T* base, double k0, int64_t ci) {
    St s = St::init(c);
    const int64_t begin = ci * kStateChunk, end = std::min(r, begin + kStateChunk);
    if constexpr (K == kernels::StateKind::Moments) {
      // A chunk's moments in two passes over it (in cache): no division per element.
      double sum = 0, m2 = 0;
      for (int64_t k = begin; k < end; ++k) sum += static_cast<double>(base[k * inner]) - k0;
      const double mean = sum / static_cast<double>(end - begin);
      for (int64_t k = begin; k < end; ++k) {
        const double d = static_cast<double>(base[k * inner]) - k0 - mean;
        m2 += d * d;
      }
      s.mean = mean, s.m2 = m2, s.n = end - begin;
    } else {
      for (int64_t k = begin; k < end; ++k) s.add(static_cast<double>(base[k * inner]) - k0, k, c);
    }
    return s;
  };
  auto store = [&](int64_t o, const St& s) {
    if constexpr (K == kernels::StateKind::Arg) out[o] = static_cast<O>(s.index());
    else out[o] = static_cast<O>(s.value(c));
  };
  if (nchunk > 1 && nout < 4 * at::get_num_threads()) {
    std::vector<St> parts(static_cast<size_t>(nout * nchunk));
    at::parallel_for(0, nout * nchunk, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const T* base = base_of(i / nchunk);
        parts[static_cast<size_t>(i)] = chunk(base, shift_of(base), i % nchunk);
      }
    });
    for (int64_t o = 0; o < nout; ++o) {
      St s = parts[static_cast<size_t>(o * nchunk)];
      for (int64_t ci = 1; ci < nchunk; ++ci) s.merge(parts[static_cast<size_t>(o * nchunk + ci)], c);
      store(o, s);
    }
    return;
  }
  if (inner >= 8) {
    // Columns: blocks of kBlock neighbouring outputs walk the rows together (contiguous reads),
    // each column's arithmetic in the same order as one output alone: the same result.
    constexpr int64_t kBlock = 64;
    const int64_t nblk = (inner + kBlock - 1) / kBlock;
    at::parallel_for(0, outer * nblk, 1, [&](int64_t b0, int64_t b1) {
      std::vector<St> acc(kBlock), part(kBlock);
      std::vector<double> k0(kBlock), sum(kBlock), m2(kBlock);
      for (int64_t bi = b0; bi < b1; ++bi) {
        const int64_t o0 = (bi / nblk) * inner + (bi % nblk) * kBlock;
        const int64_t nc = std::min(kBlock, inner - (bi % nblk) * kBlock);
        const T* base = base_of(o0);
        for (int64_t j = 0; j < nc; ++j) k0[j] = shift_of(base + j);
        for (int64_t ci = 0; ci < nchunk; ++ci) {
          const int64_t begin = ci * kStateChunk, end = std::min(r, begin + kStateChunk);
          if constexpr (K == kernels::StateKind::Moments) {
            std::fill(sum.begin(), sum.end(), 0.0);
            std::fill(m2.begin(), m2.end(), 0.0);
            for (int64_t k = begin; k < end; ++k)
              for (int64_t j = 0; j < nc; ++j) sum[j] += static_cast<double>(base[k * inner + j]) - k0[j];
            for (int64_t j = 0; j < nc; ++j) sum[j] /= static_cast<double>(end - begin);  // the means
            for (int64_t k = begin; k < end; ++k)
              for (int64_t j = 0; j < nc; ++j) {
                const double d = static_cast<double>(base[k * inner + j]) - k0[j] - sum[j];
                m2[j] += d * d;
              }
            for (int64_t j = 0; j < nc; ++j) part[j].mean = sum[j], part[j].m2 = m2[j], part[j].n = end - begin;
          } else {
            for (int64_t j = 0; j < nc; ++j) part[j] = St::init(c);
            for (int64_t k = begin; k < end; ++k)
              for (int64_t j = 0; j < nc; ++j) part[j].add(static_cast<double>(base[k * inner + j]) - k0[j], k, c);
          }
          for (int64_t j = 0; j < nc; ++j) {
            if (ci == 0) acc[j] = part[j];
            else acc[j].merge(part[j], c);
          }
        }
        for (int64_t j = 0; j < nc; ++j) store(o0 + j, acc[j]);
      }
    });
    return;
  }
  at::parallel_for(0, nout, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const T* base = base_of(o);
      const double k0 = shift_of(base);
      St s = chunk(base, k0, 0);
      for (int64_t ci = 1; ci < nchunk; ++ci) s.merge(chunk(base, k0, ci), c);
      store(o, s);
    }
  });
}

at::Tensor reduce_cpu(const at::Tensor& x, c10::string_view op, at::OptionalIntArrayRef dim,
                      bool keepdim, std::optional<at::ScalarType> dtype, double correction, double ord,
                      c10::string_view mechanism, int64_t stages) {
  parse_mechanism("reduce", mechanism);
  check_stages("reduce", stages);
  const ReducePlan plan = check_reduce(x, op, dim, keepdim, dtype, correction, ord);
  if (is_state_op(plan.op)) {
    const kernels::StateCtx c = kernels::make_state_ctx(plan.op, plan.correction, plan.ord);
    return run_reduce(x, plan, [&](const at::Tensor& in, at::Tensor& out, const ReduceStep& s) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "reduce_state_cpu", [&] {
        using T = scalar_t;
        const T* xp = in.const_data_ptr<T>();
        kernels::dispatch_state_kind(kernels::state_kind(plan.op), [&](auto kind) {
          constexpr kernels::StateKind K = decltype(kind)::value;
          if constexpr (K == kernels::StateKind::Arg) {
            reduce_state_cpu_impl<K, T, int64_t>(xp, out.mutable_data_ptr<int64_t>(), s.outer, s.r, s.inner, c);
          } else {
            AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "reduce_state_cpu_out", [&] {
              reduce_state_cpu_impl<K, T, scalar_t>(xp, out.mutable_data_ptr<scalar_t>(), s.outer, s.r, s.inner, c);
            });
          }
        });
      });
    });
  }
  return run_reduce(x, plan, [&](const at::Tensor& in, at::Tensor& out, const ReduceStep& s) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "reduce_cpu", [&] {
      using T = scalar_t;
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "reduce_cpu_out", [&] {
        using O = scalar_t;
        if (plan.acc_double)
          reduce_cpu_impl<T, double, O>(in.const_data_ptr<T>(), out.mutable_data_ptr<O>(), s.outer, s.r, s.inner, plan.op);
        else
          reduce_cpu_impl<T, float, O>(in.const_data_ptr<T>(), out.mutable_data_ptr<O>(), s.outer, s.r, s.inner, plan.op);
      });
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(cupipe, CPU, m) {
  m.impl("stream_copy", &stream_copy_cpu);
  m.impl("stencil1d", &stencil1d_cpu);
  m.impl("stencil2d", &stencil2d_cpu);
  m.impl("stencil3d", &stencil3d_cpu);
  m.impl("_stencil1d_weight_grad", &stencil1d_weight_grad_cpu);
  m.impl("_stencil2d_weight_grad", &stencil2d_weight_grad_cpu);
  m.impl("reduce", &reduce_cpu);
}

}  // namespace ops
}  // namespace cupipe
