// The reductions that carry more than one value per partial result, as states with an add (one
// element at its index along r) and a merge (two partial states): var and std (Moments: count,
// mean and the sum of squared deviations, Welford's update and Chan's merge, one pass and
// numerically sound), argmax and argmin (Arg: value and first index), logsumexp (Lse: running
// maximum and the sum of exponentials scaled by it) and the vector norms (Norm: one value after a
// per-element map). Host and device code: the CPU kernels (csrc/ops/cpu_kernels.cpp) and the CUDA
// ones (reduce/stateful.cuh) share these, so the two agree by construction.
//
// Every merge is deterministic given its operands; the kernels merge in a fixed order, so results
// are bit-identical from run to run. Arg's merge takes the smaller index among equal values, so its
// result does not depend on the order at all.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/params.h"

#ifdef __CUDACC__
#define CUPIPE_ST_HD __host__ __device__ __forceinline__
#else
#define CUPIPE_ST_HD inline
#endif
// Block loops unrolled on the device: a block indexed in a loop would live in local memory.
#ifdef __CUDA_ARCH__
#define CUPIPE_ST_UNROLL _Pragma("unroll")
#else
#define CUPIPE_ST_UNROLL
#endif

namespace cupipe {
namespace kernels {

// The state type a reduction carries; the kernels are compiled once per kind, the ops of a kind
// (argmax and argmin, the norms' orders, var and std) differ at run time.
enum class StateKind : int { Moments = 0, Arg = 1, Lse = 2, Norm = 3 };

// Runs f(std::integral_constant<StateKind, k>{}): code compiled per kind, chosen at run time.
template <class F>
void dispatch_state_kind(StateKind k, F&& f) {
  switch (k) {
    case StateKind::Moments: f(std::integral_constant<StateKind, StateKind::Moments>{}); break;
    case StateKind::Arg: f(std::integral_constant<StateKind, StateKind::Arg>{}); break;
    case StateKind::Lse: f(std::integral_constant<StateKind, StateKind::Lse>{}); break;
    case StateKind::Norm: f(std::integral_constant<StateKind, StateKind::Norm>{}); break;
  }
}

inline constexpr StateKind state_kind(ReduceOp op) {
  return op == ReduceOp::Var || op == ReduceOp::Std ? StateKind::Moments
         : op == ReduceOp::Argmax || op == ReduceOp::Argmin ? StateKind::Arg
         : op == ReduceOp::Logsumexp ? StateKind::Lse
                                     : StateKind::Norm;
}

// The norm's per-element map and combine, from `ord` (Pow: any other finite order p).
enum class NormOrd : int { Zero = 0, One = 1, Two = 2, Inf = 3, NegInf = 4, Pow = 5 };

// What the add, merge and final value need besides the states: fixed for a call.
struct StateCtx {
  ReduceOp op = ReduceOp::Var;
  NormOrd ord = NormOrd::Two;
  double p = 2;  // NormOrd::Pow's order
  double correction = 1;
};

inline StateCtx make_state_ctx(ReduceOp op, double correction, double ord) {
  StateCtx c;
  c.op = op;
  c.correction = correction;
  c.p = ord;
  c.ord = ord == 0                       ? NormOrd::Zero
          : ord == 1                     ? NormOrd::One
          : ord == 2                     ? NormOrd::Two
          : std::isinf(ord) && ord > 0   ? NormOrd::Inf
          : std::isinf(ord)              ? NormOrd::NegInf
                                         : NormOrd::Pow;
  return c;
}

// fp32 exp on the device: the SFU's exp2 (__expf: a few ulp for the arguments near 0 that carry a
// logsumexp), where expf's range reduction made the long rows' fold instruction-bound.
CUPIPE_ST_HD float st_exp(float v) {
#ifdef __CUDA_ARCH__
  return __expf(v);
#else
  return expf(v);
#endif
}
CUPIPE_ST_HD double st_exp(double v) { return exp(v); }
CUPIPE_ST_HD float st_log(float v) { return logf(v); }
CUPIPE_ST_HD double st_log(double v) { return log(v); }
CUPIPE_ST_HD float st_sqrt(float v) { return sqrtf(v); }
CUPIPE_ST_HD double st_sqrt(double v) { return sqrt(v); }
CUPIPE_ST_HD float st_pow(float v, double p) { return powf(v, static_cast<float>(p)); }
CUPIPE_ST_HD double st_pow(double v, double p) { return pow(v, p); }
CUPIPE_ST_HD float st_abs(float v) { return fabsf(v); }
CUPIPE_ST_HD double st_abs(double v) { return fabs(v); }
// a / b where b is a positive count: the device's fast fp32 division (2 ulp) in the kernels' adds
// and merges, exact division on the host.
CUPIPE_ST_HD float st_div_count(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdividef(a, b);
#else
  return a / b;
#endif
}
CUPIPE_ST_HD double st_div_count(double a, double b) { return a / b; }
template <typename A>
CUPIPE_ST_HD A st_inf() { return static_cast<A>(INFINITY); }

// NaN propagating max / min: once NaN, always NaN (as torch's amax, and the inf norms).
template <typename A>
CUPIPE_ST_HD A nan_max(A a, A v) { return (a != a) ? a : ((v != v || v > a) ? v : a); }
template <typename A>
CUPIPE_ST_HD A nan_min(A a, A v) { return (a != a) ? a : ((v != v || v < a) ? v : a); }
// fp32 on sm_80 and later: one instruction each (max.NaN / min.NaN give NaN when either input is);
// elsewhere the templates above.
CUPIPE_ST_HD float nan_max(float a, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(v));
  return r;
#else
  return nan_max<float>(a, v);
#endif
}
CUPIPE_ST_HD float nan_min(float a, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(v));
  return r;
#else
  return nan_min<float>(a, v);
#endif
}

template <typename A, StateKind K>
struct State;

// var / std: n elements, their mean, and m2 = sum of squared deviations from it. The kernels add
// x - K for one K per output (its first element), so that the mean stays near 0 whatever the
// offset of the data: in fp32, values near 1e6 would otherwise round the running mean to 1/16 and
// the variance of N(1e6, 1) data by several percent.
template <typename A>
struct State<A, StateKind::Moments> {
  A mean, m2;
  int64_t n;
  static CUPIPE_ST_HD State init(const StateCtx&) { return {A(0), A(0), 0}; }
  CUPIPE_ST_HD void add(A x, int64_t, const StateCtx&) {
    ++n;
    const A d = x - mean;
    mean += st_div_count(d, static_cast<A>(n));
    m2 += d * (x - mean);  // both factors share a sign: m2 never decreases
  }
  // N elements at once: their own mean and m2 (N a power of two: the mean is exact to a rounding),
  // then Chan's merge. One division per block instead of one per element.
  template <int N>
  CUPIPE_ST_HD void add_block(const A (&x)[N], int64_t, int64_t, const StateCtx&) {
    A sum = x[0];
    for (int j = 1; j < N; ++j) sum += x[j];
    const A mb = sum * (A(1) / A(N));
    A m2b = A(0);
    for (int j = 0; j < N; ++j) m2b += (x[j] - mb) * (x[j] - mb);
    const int64_t nn = n + N;  // n == 0 needs no branch: f = 1 gives mean = mb, m2 = m2b
    const A d = mb - mean, f = st_div_count(static_cast<A>(N), static_cast<A>(nn));
    mean += d * f;
    m2 += m2b + d * d * static_cast<A>(n) * f;
    n = nn;
  }
  CUPIPE_ST_HD void merge(const State& b, const StateCtx&) {
    if (b.n == 0) return;
    if (n == 0) {
      *this = b;
      return;
    }
    const int64_t nn = n + b.n;
    const A d = b.mean - mean, f = st_div_count(static_cast<A>(b.n), static_cast<A>(nn));
    mean += d * f;
    m2 += b.m2 + d * d * static_cast<A>(n) * f;
    n = nn;
  }
  // torch's divisor: max(n - correction, 0) (0: inf, or nan for no spread).
  CUPIPE_ST_HD A value(const StateCtx& c) const {
    const double dof = static_cast<double>(n) - c.correction;
    const A var = m2 / static_cast<A>(dof > 0 ? dof : 0.0);
    return c.op == ReduceOp::Std ? st_sqrt(var) : var;
  }
};

// argmax / argmin: the best value so far and its index (-1: no element yet). NaN ranks above every
// number for both, as in torch; equal values keep the smaller index.
template <typename A>
struct State<A, StateKind::Arg> {
  A v;
  int64_t i;
  static CUPIPE_ST_HD State init(const StateCtx&) { return {A(0), -1}; }
  static CUPIPE_ST_HD bool beats(A a, A b, bool max) {
    if (a != a) return b == b;
    if (b != b) return false;
    return max ? a > b : a < b;
  }
  // Elements come in ascending index order within a state, so a tie keeps the earlier one.
  CUPIPE_ST_HD void add(A x, int64_t idx, const StateCtx& c) {
    if (i < 0 || beats(x, v, c.op == ReduceOp::Argmax)) v = x, i = idx;
  }
  // N elements at indices idx, idx + step, ...: the block's best (first among ties), then one add.
  template <int N>
  CUPIPE_ST_HD void add_block(const A (&x)[N], int64_t idx, int64_t step, const StateCtx& c) {
    const bool max = c.op == ReduceOp::Argmax;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same<A, float>::value) {
      // The NaN-propagating max (min) is one instruction an element, where beats' selects form a
      // chain.
      float m = x[0];
      if (max) {
#pragma unroll
        for (int j = 1; j < N; ++j) asm("max.NaN.f32 %0, %0, %1;" : "+f"(m) : "f"(x[j]));
      } else {
#pragma unroll
        for (int j = 1; j < N; ++j) asm("min.NaN.f32 %0, %0, %1;" : "+f"(m) : "f"(x[j]));
      }
      // Only a block that beats the state needs the first index holding its best (after a state's
      // first blocks, seldom): compares that do not depend on each other.
      if (i >= 0 && !beats(m, v, max)) return;
      const bool nan = m != m;
      int bj = N - 1;
#pragma unroll
      for (int j = N - 2; j >= 0; --j)
        if (nan ? x[j] != x[j] : x[j] == m) bj = j;
      v = m, i = idx + bj * step;
      return;
    }
#endif
    A bv = x[0];
    int bj = 0;
    for (int j = 1; j < N; ++j)
      if (beats(x[j], bv, max)) bv = x[j], bj = j;
    add(bv, idx + bj * step, c);
  }
  CUPIPE_ST_HD void merge(const State& b, const StateCtx& c) {
    if (b.i < 0) return;
    const bool max = c.op == ReduceOp::Argmax;
    if (i < 0 || beats(b.v, v, max) || (!beats(v, b.v, max) && b.i < i)) *this = b;
  }
  CUPIPE_ST_HD int64_t index() const { return i; }
};

// logsumexp: m, the largest element so far (NaN never enters it), and s = sum of exp(x - m). An
// element equal to m adds 1 without exp(m - m), which is NaN for infinite m; an empty state is
// (-inf, 0), whose value is -inf as torch's.
template <typename A>
struct State<A, StateKind::Lse> {
  A m, s;
  static CUPIPE_ST_HD State init(const StateCtx&) { return {-st_inf<A>(), A(0)}; }
  CUPIPE_ST_HD void add(A x, int64_t, const StateCtx&) {
    if (x > m) {
      s = s * st_exp(m - x) + A(1);
      m = x;
    } else {
      s += x == m ? A(1) : st_exp(x - m);  // NaN x: s turns NaN
    }
  }
  // N elements at once: one rescale to the block's maximum (NaN never enters it, as in add), then
  // add's sum without a branch.
  template <int N>
  CUPIPE_ST_HD void add_block(const A (&x)[N], int64_t, int64_t, const StateCtx&) {
    A mb = x[0];
    for (int j = 1; j < N; ++j) mb = x[j] > mb || mb != mb ? x[j] : mb;
    if (mb > m) {
      s *= st_exp(m - mb);
      m = mb;
    }
#ifdef __CUDA_ARCH__
    if constexpr (std::is_same<A, float>::value) {
      if (m - m == 0.f) {  // finite m: exp(x - m) as 2^(x log2 e - m log2 e), one FMA and the SFU's exp2
        const float ml = m * 1.44269504f;
        for (int j = 0; j < N; ++j) {
          float e;
          asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(x[j], 1.44269504f, -ml)));
          s += e;
        }
        return;
      }
    }
#endif
    for (int j = 0; j < N; ++j) s += x[j] == m ? A(1) : st_exp(x[j] - m);
  }
  CUPIPE_ST_HD void merge(const State& b, const StateCtx&) {
    const A mx = b.m > m ? b.m : m;
    s = (m == mx ? s : s * st_exp(m - mx)) + (b.m == mx ? b.s : b.s * st_exp(b.m - mx));
    m = mx;
  }
  CUPIPE_ST_HD A value(const StateCtx&) const { return m + st_log(s); }
};

// vector norms: ord 0 counts nonzeros, 1 sums |x|, 2 sums x^2 (then the root), inf / -inf take
// the largest / smallest |x| (NaN propagates, as in torch), any other p sums |x|^p (then the
// 1/p-th power).
template <typename A>
struct State<A, StateKind::Norm> {
  A v;
  static CUPIPE_ST_HD State init(const StateCtx& c) { return {c.ord == NormOrd::NegInf ? st_inf<A>() : A(0)}; }
  CUPIPE_ST_HD void add(A x, int64_t, const StateCtx& c) {
    switch (c.ord) {
      case NormOrd::Zero: v += x != A(0) ? A(1) : A(0); break;
      case NormOrd::One: v += st_abs(x); break;
      case NormOrd::Two: v += x * x; break;
      case NormOrd::Inf: v = nan_max(v, st_abs(x)); break;
      case NormOrd::NegInf: v = nan_min(v, st_abs(x)); break;
      case NormOrd::Pow: v += st_pow(st_abs(x), c.p); break;
    }
  }
  // N elements at once: the order's switch taken once.
  template <int N>
  CUPIPE_ST_HD void add_block(const A (&x)[N], int64_t, int64_t, const StateCtx& c) {
    switch (c.ord) {
      case NormOrd::One:
        CUPIPE_ST_UNROLL
        for (int j = 0; j < N; ++j) v += st_abs(x[j]);
        break;
      case NormOrd::Two:
        CUPIPE_ST_UNROLL
        for (int j = 0; j < N; ++j) v += x[j] * x[j];
        break;
      case NormOrd::Inf:
        CUPIPE_ST_UNROLL
        for (int j = 0; j < N; ++j) v = nan_max(v, st_abs(x[j]));
        break;
      default:
        CUPIPE_ST_UNROLL
        for (int j = 0; j < N; ++j) add(x[j], 0, c);
    }
  }
  CUPIPE_ST_HD void merge(const State& b, const StateCtx& c) {
    if (c.ord == NormOrd::Inf) v = nan_max(v, b.v);
    else if (c.ord == NormOrd::NegInf) v = nan_min(v, b.v);
    else v += b.v;
  }
  CUPIPE_ST_HD A value(const StateCtx& c) const {
    return c.ord == NormOrd::Two ? st_sqrt(v) : c.ord == NormOrd::Pow ? st_pow(v, 1.0 / c.p) : v;
  }
};

}  // namespace kernels
}  // namespace cupipe
