// Owned<Handle, destroy>: unique ownership of a C library handle (cuBLASLt/cuDNN context or
// descriptor), released with its destroy function. Destroy's status is ignored: destructors
// cannot report it, and it fails only for handles that were never valid.
#pragma once
#include <memory>
#include <type_traits>

namespace ringtrain::cuda {

template <auto destroy>
struct Destroyer {
  template <typename T>
  void operator()(T* handle) const {
    static_cast<void>(destroy(handle));
  }
};

template <typename Handle, auto destroy>
using Owned = std::unique_ptr<std::remove_pointer_t<Handle>, Destroyer<destroy>>;

}  // namespace ringtrain::cuda
