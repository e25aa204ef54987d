// The id of a kernel instance: its template-id as written inside namespace cupipe::kernels, e.g.
// "stencil_kernel<engine::Mechanism::Tma,2,float,StencilFamily::Box,2>". The launchers compose it
// from their template arguments; cupipe/_kernels.py enumerates the same strings for the build and
// for cupipe.precompile, and the first-use compile pastes it into CUPIPE_KERNEL_INSTANCE.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "engine/mechanism.h"

namespace cupipe {
namespace kernels {

template <typename T>
struct type_c {};

template <typename T>
const char* kernel_type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, __half>) return "__half";
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return "__nv_bfloat16";
  else static_assert(sizeof(T) == 0, "a kernel id names float, double, __half or __nv_bfloat16");
}

inline const char* mechanism_enumerator(engine::Mechanism m) {
  switch (m) {
    case engine::Mechanism::Sync: return "Sync";
    case engine::Mechanism::Pipeline: return "Pipeline";
    case engine::Mechanism::PipelineThread: return "PipelineThread";
    case engine::Mechanism::Primitives: return "Primitives";
    case engine::Mechanism::Cg: return "Cg";
    case engine::Mechanism::Barrier: return "Barrier";
    case engine::Mechanism::Specialized: return "Specialized";
    case engine::Mechanism::Tma: return "Tma";
  }
  return "?";
}

inline std::string kernel_id_arg(engine::Mechanism m) { return std::string("engine::Mechanism::") + mechanism_enumerator(m); }
inline std::string kernel_id_arg(int v) { return std::to_string(v); }
inline std::string kernel_id_arg(bool v) { return v ? "true" : "false"; }
inline std::string kernel_id_arg(const char* s) { return s; }  // an enumerator spelled by the caller
template <typename T>
std::string kernel_id_arg(type_c<T>) { return kernel_type_name<T>(); }

template <class... A>
std::string kernel_id(const char* name, A... args) {
  std::string s = std::string(name) + "<";
  bool first = true;
  ((s += (first ? "" : ","), s += kernel_id_arg(args), first = false), ...);
  return s + ">";
}

}  // namespace kernels
}  // namespace cupipe
