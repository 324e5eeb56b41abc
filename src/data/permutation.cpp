// Philox-driven Fisher-Yates shuffle.
#include "data/permutation.h"

#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace headroom {

namespace {

// 64-bit draws from the Philox stream of (seed, epoch): block k gives two of them.
class EpochStream {
 public:
  EpochStream(uint64_t seed, int64_t epoch) : seed_(seed), epoch_(static_cast<uint64_t>(epoch)) {}

  uint64_t next() {
    if (word_ == 2) {
      const Philox4x32Block counter{
          {static_cast<uint32_t>(block_), static_cast<uint32_t>(block_ >> 32),
           static_cast<uint32_t>(epoch_), static_cast<uint32_t>(epoch_ >> 32)}};
      block_words_ =
          philox4x32_10(counter, static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32));
      ++block_;
      word_ = 0;
    }
    const uint64_t lo = block_words_.word[2 * word_], hi = block_words_.word[2 * word_ + 1];
    ++word_;
    return lo | (hi << 32);
  }

  // Uniform in [0, range), range >= 1 (Lemire, "Fast random integer generation in an interval").
  uint64_t below(uint64_t range) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * range;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < range) {
      const uint64_t threshold = (0 - range) % range;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * range;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t seed_;
  uint64_t epoch_;
  uint64_t block_ = 0;
  Philox4x32Block block_words_{};
  int word_ = 2;
};

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) throw ValueError(str_cat("epoch_permutation: n is ", n, ", it must be >= 0"));
  if (epoch < 0)
    throw ValueError(str_cat("epoch_permutation: epoch is ", epoch, ", it must be >= 0"));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  EpochStream stream(seed, epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(stream.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace headroom
