// A random number generator state: a Philox seed and an offset into its stream. Draws reserve
// blocks of the stream, so CPU and CUDA kernels given the same state produce the same numbers.
#pragma once

#include <cstdint>
#include <mutex>

#include "core/philox.h"

namespace headroom {

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default seed

  explicit Generator(uint64_t seed = kDefaultSeed) : state_{seed, 0} {}

  // Restarts the stream of `seed` at offset 0, as torch.manual_seed does.
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  void set_offset(uint64_t offset);

  // The state to draw `n` numbers from; advances the offset past them
  // (see Note [Philox stream layout]).
  PhiloxState reserve(uint64_t n);

 private:
  mutable std::mutex mutex_;
  PhiloxState state_;
};

// The process-wide generator that tensor factories use when none is given.
Generator& default_generator();

// Seeds the default generator.
void manual_seed(uint64_t seed);

// Puts the default generator at (seed, offset) for its scope and back after: a recompute draws
// what the forward drew (dropout's masks).
class DefaultGeneratorStateGuard {
 public:
  DefaultGeneratorStateGuard(uint64_t seed, uint64_t offset);
  ~DefaultGeneratorStateGuard();
  DefaultGeneratorStateGuard(const DefaultGeneratorStateGuard&) = delete;
  DefaultGeneratorStateGuard& operator=(const DefaultGeneratorStateGuard&) = delete;

 private:
  uint64_t seed_, offset_;
};

}  // namespace headroom
