// Generator state handling.
#include "core/generator.h"

namespace headroom {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = PhiloxState{seed, 0};
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.seed;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.offset;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.offset = offset;
}

PhiloxState Generator::reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  PhiloxState drawn = state_;
  state_.offset += philox_blocks_for(n);
  return drawn;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

DefaultGeneratorStateGuard::DefaultGeneratorStateGuard(uint64_t seed, uint64_t offset)
    : seed_(default_generator().seed()), offset_(default_generator().offset()) {
  default_generator().manual_seed(seed);
  default_generator().set_offset(offset);
}

DefaultGeneratorStateGuard::~DefaultGeneratorStateGuard() {
  default_generator().manual_seed(seed_);
  default_generator().set_offset(offset_);
}

}  // namespace headroom
