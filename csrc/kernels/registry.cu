#include "kernels/registry.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "kernels/launch_utils.cuh"

namespace cupipe {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, const void*> ahead;   // registered at load, never changed after
  std::map<std::string, const void*> loaded;  // cudaKernel_t from cubins, kept for the process
  KernelCompiler compiler = nullptr;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: kernels may launch during interpreter exit
  return *r;
}

thread_local std::vector<PlannedKernel>* t_plan = nullptr;

}  // namespace

KernelPlanScope::KernelPlanScope(std::vector<PlannedKernel>* out) : prev_(t_plan) { t_plan = out; }
KernelPlanScope::~KernelPlanScope() { t_plan = prev_; }
bool planning_kernels() { return t_plan != nullptr; }
void record_planned_launch(int64_t blocks, int threads, int64_t smem) {
  if (t_plan == nullptr || t_plan->empty()) return;
  t_plan->back().blocks = blocks;
  t_plan->back().threads = threads;
  t_plan->back().smem = smem;
}

std::string normalize_kernel_id(const std::string& id) {
  std::string s;
  s.reserve(id.size());
  for (char c : id)
    if (c != ' ' && c != '\n' && c != '\t') s.push_back(c);
  return s;
}

KernelRegistration::KernelRegistration(const char* id, const void* fn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.ahead.emplace(normalize_kernel_id(id), fn);
}

void set_kernel_compiler(KernelCompiler compiler) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.compiler = compiler;
}

void load_kernel_cubin(const std::string& id_in, const std::string& cubin) {
  const std::string id = normalize_kernel_id(id_in);
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.loaded.count(id)) return;
  }
  // Libraries are context-independent: one load serves every device of the process.
  cudaLibrary_t lib = nullptr;
  CUPIPE_CUDA_CHECK(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  unsigned int count = 0;
  CUPIPE_CUDA_CHECK(cudaLibraryGetKernelCount(&count, lib));
  if (count != 1) {
    cudaLibraryUnload(lib);
    throw std::runtime_error("cupipe: the cubin of " + id + " holds " + std::to_string(count) +
                             " kernels, expected exactly one (a stale or foreign cache file?)");
  }
  cudaKernel_t k = nullptr;
  CUPIPE_CUDA_CHECK(cudaLibraryEnumerateKernels(&k, 1, lib));
  std::lock_guard<std::mutex> lock(r.mu);
  r.loaded.emplace(id, reinterpret_cast<const void*>(k));  // a racing load of the same id: first wins
}

const void* kernel_function(const char* header, const std::string& id_in, Stream stream) {
  const std::string id = normalize_kernel_id(id_in);
  Registry& r = registry();
  const int device = current_device();
  const bool ahead_usable = device_info(device).ahead_of_time_code;
  KernelCompiler compiler = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (ahead_usable) {
      auto it = r.ahead.find(id);
      if (it != r.ahead.end()) {
        if (t_plan) t_plan->push_back({id, "ahead-of-time"});
        return it->second;
      }
    }
    auto it = r.loaded.find(id);
    if (it != r.loaded.end()) {
      if (t_plan) t_plan->push_back({id, "first-use"});
      return it->second;
    }
    compiler = r.compiler;
  }
  if (t_plan) {  // planning: compile nothing
    t_plan->push_back({id, ""});
    return nullptr;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUPIPE_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    throw std::runtime_error("cupipe: kernel " + id +
                             " is not built ahead of time nor loaded yet, and the stream is being captured "
                             "into a CUDA graph, where it cannot be compiled or loaded; call the op once before "
                             "capturing, or cupipe.precompile(...) for its configuration");
  if (compiler == nullptr)
    throw std::runtime_error("cupipe: kernel " + id + " is not built ahead of time and no compiler is installed");
  load_kernel_cubin(id, compiler(header, id, device));
  std::lock_guard<std::mutex> lock(r.mu);
  return r.loaded.at(id);
}

std::string kernel_origin(const std::string& id_in) {
  const std::string id = normalize_kernel_id(id_in);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.ahead.count(id)) return "ahead-of-time";
  if (r.loaded.count(id)) return "first-use";
  return "";
}

std::vector<std::string> ahead_of_time_kernels() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> ids;
  for (const auto& kv : r.ahead) ids.push_back(kv.first);
  return ids;
}

}  // namespace cupipe
