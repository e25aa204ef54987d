// CUPIPE_KERNEL_INSTANCE(template-id): compiles that kernel instance in this translation unit and,
// in the module, registers it under its id (registry.h). The ahead-of-time files that setup.py
// writes and the one-instance files of first-use compiles are this header, the kernel's header and
// these lines, so an instance compiles the same way on either path; a cubin has no host code, so
// there the registration is not compiled at all. No library headers: an instance's compile parses
// only its kernel's.
#pragma once

namespace cupipe {
// Registers an ahead-of-time instance under its id at module load (registry.cu).
struct KernelRegistration {
  KernelRegistration(const char* id, const void* fn);
};
}  // namespace cupipe

#define CUPIPE_INSTANCE_CAT2(a, b) a##b
#define CUPIPE_INSTANCE_CAT(a, b) CUPIPE_INSTANCE_CAT2(a, b)
#define CUPIPE_KERNEL_INSTANCE(...)                                                      \
  static const ::cupipe::KernelRegistration CUPIPE_INSTANCE_CAT(cupipe_instance_, __COUNTER__)( \
      #__VA_ARGS__, reinterpret_cast<const void*>(&__VA_ARGS__));
