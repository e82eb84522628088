// Throws PyTorch's own out-of-memory exception (c10::OutOfMemoryError), which PyTorch's
// Python bindings turn into torch.cuda.OutOfMemoryError. Built against the PyTorch in use
// (python -m gmlake_torch build-oom-shim) and registered by enable(); the allocator calls
// it on an out-of-memory it cannot resolve, from inside PyTorch's allocation call.
#include <c10/util/Exception.h>

extern "C" __attribute__((visibility("default"))) void gmlake_throw_oom(const char* message) {
  TORCH_CHECK_WITH(OutOfMemoryError, false, message);
}
