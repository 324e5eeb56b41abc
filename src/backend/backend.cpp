// The registry of device backends (backend/backend.h).
#include "backend/backend.h"

#include <array>

#include "core/error.h"

namespace headroom {
namespace {

struct Registry {
  std::array<KernelTables, kNumDeviceTypes> tables{};
  std::array<bool, kNumDeviceTypes> registered{};
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_backend(const Backend& backend) {
  if (backend.allocator) register_device_allocator(backend.type, backend.allocator);
  if (backend.tensor_kernels) register_device_kernels(backend.type, backend.tensor_kernels);
  if (backend.activity_source) {
    register_device_activity_source(backend.type, backend.activity_source);
  }
  Registry& r = registry();
  const size_t i = static_cast<size_t>(backend.type);
  // Each entry learns its family's name, for the kernel census (Note [Kernel costs]).
  r.tables[i] =
      std::apply([](const auto&... family) { return KernelTables{named_kernels(family)...}; },
                 backend.kernels);
  r.registered[i] = true;
}

const KernelTables* find_kernel_tables(DeviceType type) {
  const Registry& r = registry();
  const size_t i = static_cast<size_t>(type);
  return r.registered[i] ? &r.tables[i] : nullptr;
}

const void* find_kernel_family(DeviceType type, const std::type_info& family) {
  const KernelTables* tables = find_kernel_tables(type);
  if (!tables) return nullptr;
  const void* found = nullptr;
  std::apply(
      [&](const auto&... table) { ((typeid(table) == family ? (found = &table, 0) : 0), ...); },
      *tables);
  return found;
}

KernelTables noop_kernel_tables() {
  return std::apply(
      [](const auto&... family) {
        return KernelTables{noop_kernels<std::decay_t<decltype(family)>>()...};
      },
      KernelTables{});
}

std::vector<std::string> missing_kernels(const KernelTables& tables) {
  std::vector<std::string> missing;
  std::apply(
      [&](const auto&... family) {
        (
            [&] {
              for (std::string& m : missing_kernels(family)) missing.push_back(std::move(m));
            }(),
            ...);
      },
      tables);
  return missing;
}

void throw_missing_kernel(const char* op, Device device, const char* family, const char* entry) {
  throw NotImplementedError(
      str_cat(op, " has no kernel for ", device, " yet: its backend lacks ", family, ".", entry));
}

}  // namespace headroom
