// Devices a tensor can live on: the CPU, a CUDA GPU, and `meta`, which hands out addresses but
// no memory and whose kernels do nothing, so a whole training step can be dry-run for its memory.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace headroom {

enum class DeviceType : uint8_t { cpu, cuda, meta };
inline constexpr int kNumDeviceTypes = 3;

const char* device_type_name(DeviceType type);

// A device queue (a CUDA stream's handle); 0 is the default queue, the only one of the CPU and
// meta.
using StreamId = uint64_t;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  // "cpu", "meta", "cuda" (= cuda:0), "cuda:N"; ValueError otherwise.
  static Device parse(std::string_view text);
  std::string str() const;  // "cpu", "meta", "cuda:0"

  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool is_meta() const { return type == DeviceType::meta; }
};

inline constexpr Device kCPU{DeviceType::cpu, 0};
inline constexpr Device kMeta{DeviceType::meta, 0};

std::ostream& operator<<(std::ostream& out, const Device& device);

// GPUs present and usable in this process; 0 in a CPU-only build or without a driver.
int cuda_device_count();
bool cuda_is_available();

}  // namespace headroom
