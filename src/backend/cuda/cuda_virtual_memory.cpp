// The driver calls of expandable segments, loaded with dlopen("libcuda.so.1").
#include "backend/cuda/cuda_virtual_memory.h"

#include <cuda.h>
#include <dlfcn.h>

#include <type_traits>

#include "core/error.h"

namespace headroom::cuda {
namespace {

// The driver entry points used here, resolved once by name.
struct DriverApi {
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                                  unsigned long long) = nullptr;
  CUresult (*cuMemAddressFree)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                          unsigned long long) = nullptr;
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                       unsigned long long) = nullptr;
  CUresult (*cuMemUnmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  bool loaded = false;
};

const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi a;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return a;
    bool all = true;
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      all = all && fn != nullptr;
    };
    load(a.cuGetErrorString, "cuGetErrorString");
    load(a.cuDeviceGet, "cuDeviceGet");
    load(a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
    load(a.cuMemAddressReserve, "cuMemAddressReserve");
    load(a.cuMemAddressFree, "cuMemAddressFree");
    load(a.cuMemCreate, "cuMemCreate");
    load(a.cuMemRelease, "cuMemRelease");
    load(a.cuMemMap, "cuMemMap");
    load(a.cuMemUnmap, "cuMemUnmap");
    load(a.cuMemSetAccess, "cuMemSetAccess");
    a.loaded = all;
    return a;
  }();
  return api;
}

void check(CUresult status, const char* call) {
  if (status == CUDA_SUCCESS) return;
  const char* text = "unknown error";
  if (driver().cuGetErrorString) driver().cuGetErrorString(status, &text);
  throw Error(str_cat(call, " failed: ", text, " (CUresult ", static_cast<int>(status), ")"));
}

}  // namespace

VirtualMemory::~VirtualMemory() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!driver().loaded) return;
  for (const auto& [address, handle] : pages_) driver().cuMemRelease(handle);
  for (const auto& [base, size] : reservations_) driver().cuMemAddressFree(base, size);
}

bool VirtualMemory::supported() const {
  const DriverApi& api = driver();
  if (!api.loaded) return false;
  CUdevice device = 0;
  int flag = 0;
  if (api.cuDeviceGet(&device, device_) != CUDA_SUCCESS) return false;
  if (api.cuDeviceGetAttribute(&flag, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               device) != CUDA_SUCCESS) {
    return false;
  }
  return flag != 0;
}

void* VirtualMemory::reserve(size_t size, size_t page_size) {
  CUdeviceptr base = 0;
  check(driver().cuMemAddressReserve(&base, size, page_size, 0, 0), "cuMemAddressReserve");
  std::lock_guard<std::mutex> lock(mutex_);
  reservations_[base] = size;
  return reinterpret_cast<void*>(base);
}

void VirtualMemory::release(void* ptr, size_t size) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto base = reinterpret_cast<CUdeviceptr>(ptr);
  driver().cuMemAddressFree(base, size);
  reservations_.erase(base);
}

bool VirtualMemory::map(void* ptr, size_t size, size_t page_size) {
  const DriverApi& api = driver();
  const auto start = reinterpret_cast<CUdeviceptr>(ptr);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  std::lock_guard<std::mutex> lock(mutex_);
  // One physical allocation per page, so that any page can be unmapped on its own later.
  size_t done = 0;
  for (; done < size; done += page_size) {
    CUmemGenericAllocationHandle handle = 0;
    const CUresult status = api.cuMemCreate(&handle, page_size, &prop, 0);
    if (status == CUDA_ERROR_OUT_OF_MEMORY) break;
    check(status, "cuMemCreate");
    check(api.cuMemMap(start + done, page_size, 0, handle, 0), "cuMemMap");
    pages_[start + done] = handle;
  }
  if (done < size) {  // out of memory: give back what this call mapped
    for (size_t offset = 0; offset < done; offset += page_size) {
      api.cuMemUnmap(start + offset, page_size);
      api.cuMemRelease(pages_[start + offset]);
      pages_.erase(start + offset);
    }
    return false;
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(api.cuMemSetAccess(start, size, &access, 1), "cuMemSetAccess");
  return true;
}

void VirtualMemory::unmap(void* ptr, size_t size, size_t page_size) noexcept {
  const DriverApi& api = driver();
  const auto start = reinterpret_cast<CUdeviceptr>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t offset = 0; offset < size; offset += page_size) {
    auto it = pages_.find(start + offset);
    if (it == pages_.end()) continue;
    api.cuMemUnmap(start + offset, page_size);
    api.cuMemRelease(it->second);
    pages_.erase(it);
  }
}

}  // namespace headroom::cuda
