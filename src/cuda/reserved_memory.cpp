// Reserved device memory (CUDA virtual memory management): address space reserved whole, its
// physical memory mapped one granule (2 MiB on current GPUs) at a time, so that ZeRO stage 3
// keeps only the granules of this rank's parameter shards (release_pages) and maps the others
// again when the whole arena is gathered (commit_pages). The driver's cuMem* entry points are
// looked up through the runtime, not linked, so that a binary still starts on a machine without
// a driver (`ringtrain doctor` must). Each reservation is registered by its address range:
// release_pages and commit_pages take any pointer into one.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "check/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::cuda {
namespace {

// The driver functions used here, looked up once (CUDA 12.0's versions of them).
struct DriverApi {
  PFN_cuGetErrorString_v6000 error_string = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
};

template <typename Fn>
void look_up(Fn& fn, const char* symbol) {
  void* found = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  RT_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &found, 12000, cudaEnableDefault, &status));
  RT_REQUIRE(status == cudaDriverEntryPointSuccess && found != nullptr, Error,
             "reserved device memory: the CUDA driver has no {} (virtual memory management needs a driver for CUDA "
             ">= 12.0)",
             symbol);
  fn = reinterpret_cast<Fn>(found);
}

const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi a;
    look_up(a.error_string, "cuGetErrorString");
    look_up(a.granularity, "cuMemGetAllocationGranularity");
    look_up(a.address_reserve, "cuMemAddressReserve");
    look_up(a.address_free, "cuMemAddressFree");
    look_up(a.create, "cuMemCreate");
    look_up(a.release, "cuMemRelease");
    look_up(a.map, "cuMemMap");
    look_up(a.unmap, "cuMemUnmap");
    look_up(a.set_access, "cuMemSetAccess");
    return a;
  }();
  return api;
}

void check_driver(CUresult rc, const char* call, std::size_t bytes) {
  if (rc == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (driver().error_string(rc, &text) != CUDA_SUCCESS || text == nullptr) text = "unknown error";
  const std::string message =
      fmt::format("reserved device memory: {} ({} bytes): {} ({})", call, bytes, text, static_cast<int>(rc));
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemory(message);
  throw Error(message);
}

// One reservation: [base, base + size) reserved, granule g mapped when handles_[g] != 0.
class Reservation {
 public:
  Reservation(std::size_t bytes, int device) : api_(driver()), device_(device) {
    check::bind_thread_to_device(device_);
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = device_;
    check_driver(api_.granularity(&granule_, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity",
                 0);
    size_ = (bytes + granule_ - 1) / granule_ * granule_;
    check_driver(api_.address_reserve(&base_, size_, granule_, 0, 0), "cuMemAddressReserve", size_);
    handles_.assign(size_ / granule_, 0);
    try {
      commit(begin(), end());
      RT_CUDA_CHECK(cudaMemset(data(), 0, size_));  // zeroed, as Tensor::empty's
    } catch (...) {
      free_all();
      throw;
    }
  }
  ~Reservation() { free_all(); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

  std::uintptr_t begin() const { return static_cast<std::uintptr_t>(base_); }
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the driver hands out device addresses as integers
  void* data() const { return reinterpret_cast<void*>(base_); }
  std::uintptr_t end() const { return begin() + size_; }

  // Unmaps the granules wholly inside [from, to); returns the bytes unmapped. The device is
  // synchronized first: work queued before may still read them.
  std::int64_t release(std::uintptr_t from, std::uintptr_t to) {
    const std::size_t first = (from - begin() + granule_ - 1) / granule_, last = (to - begin()) / granule_;
    if (last <= first) return 0;
    check::bind_thread_to_device(device_);
    RT_CUDA_CHECK(cudaDeviceSynchronize());
    std::int64_t bytes = 0;
    for (std::size_t g = first; g < last; ++g)
      if (handles_[g] != 0) {
        unmap(g);
        bytes += static_cast<std::int64_t>(granule_);
      }
    return bytes;
  }

  std::int64_t mapped_bytes() const {
    return static_cast<std::int64_t>(granule_) *
           std::count_if(handles_.begin(), handles_.end(), [](CUmemGenericAllocationHandle h) { return h != 0; });
  }

  // Maps every unmapped granule that overlaps [from, to) (their contents unspecified).
  void commit(std::uintptr_t from, std::uintptr_t to) {
    if (to <= from) return;
    check::bind_thread_to_device(device_);
    const std::size_t first = (from - begin()) / granule_, last = (to - begin() + granule_ - 1) / granule_;
    for (std::size_t g = first; g < last; ++g)
      if (handles_[g] == 0) map(g);
  }

 private:
  CUdeviceptr at(std::size_t g) const { return base_ + g * granule_; }

  void map(std::size_t g) {
    CUmemGenericAllocationHandle handle = 0;
    check_driver(api_.create(&handle, granule_, &prop_, 0), "cuMemCreate", granule_);
    CUresult rc = api_.map(at(g), granule_, 0, handle, 0);
    if (rc == CUDA_SUCCESS) {
      CUmemAccessDesc access{};
      access.location = prop_.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      rc = api_.set_access(at(g), granule_, &access, 1);
      if (rc != CUDA_SUCCESS) (void)api_.unmap(at(g), granule_);
    }
    if (rc != CUDA_SUCCESS) {
      (void)api_.release(handle);
      check_driver(rc, "cuMemMap/cuMemSetAccess", granule_);
    }
    handles_[g] = handle;
  }

  void unmap(std::size_t g) {
    check_driver(api_.unmap(at(g), granule_), "cuMemUnmap", granule_);
    check_driver(api_.release(handles_[g]), "cuMemRelease", granule_);
    handles_[g] = 0;
  }

  // Best effort (a destructor's and a failed constructor's): errors are not reported.
  void free_all() noexcept {
    if (base_ == 0) return;
    (void)cudaSetDevice(device_);
    (void)cudaDeviceSynchronize();
    for (std::size_t g = 0; g < handles_.size(); ++g)
      if (handles_[g] != 0) {
        (void)api_.unmap(at(g), granule_);
        (void)api_.release(handles_[g]);
        handles_[g] = 0;
      }
    (void)api_.address_free(base_, size_);
    base_ = 0;
  }

  const DriverApi& api_;  // looked up before anything is reserved, so free_all() cannot throw
  int device_;
  CUmemAllocationProp prop_{};
  std::size_t granule_ = 0, size_ = 0;
  CUdeviceptr base_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
};

// The live reservations by their first address, and the lock that guards them: never destroyed,
// so that a tensor freed during static destruction still finds both.
struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, std::shared_ptr<Reservation>> live;
};
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// The reservation holding [data, data + bytes).
std::shared_ptr<Reservation> reservation_of(const void* data, std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.upper_bound(at);
  RT_REQUIRE(it != r.live.begin(), Error, "reserved device memory: {} is not in a reservation", data);
  --it;
  RT_REQUIRE(at + bytes <= it->second->end(), Error,
             "reserved device memory: {} bytes at {} run past the reservation's end", bytes, data);
  return it->second;
}

}  // namespace

std::shared_ptr<void> CudaBackend::reserve_pages(std::size_t bytes) const {
  int device = 0;
  RT_CUDA_CHECK(cudaGetDevice(&device));
  auto reservation = std::make_shared<Reservation>(bytes, device);
  const std::uintptr_t begin = reservation->begin();
  void* data = reservation->data();
  {
    const std::lock_guard<std::mutex> lock(registry().mutex);
    registry().live[begin] = reservation;
  }
  return {data, [begin](void*) {
            std::shared_ptr<Reservation> last;  // freed after the lock is let go
            Registry& r = registry();
            const std::lock_guard<std::mutex> lock(r.mutex);
            auto it = r.live.find(begin);
            if (it == r.live.end()) return;
            last = std::move(it->second);
            r.live.erase(it);
          }};
}

std::int64_t CudaBackend::release_pages(void* data, std::size_t bytes) const {
  const auto from = reinterpret_cast<std::uintptr_t>(data);
  return reservation_of(data, bytes)->release(from, from + bytes);
}

std::int64_t CudaBackend::mapped_bytes(const void* data) const { return reservation_of(data, 0)->mapped_bytes(); }

void CudaBackend::commit_pages(void* data, std::size_t bytes) const {
  const auto from = reinterpret_cast<std::uintptr_t>(data);
  reservation_of(data, bytes)->commit(from, from + bytes);
}

}  // namespace ringtrain::cuda
