// The order in which a DataLoader visits sequences in an epoch: a Fisher-Yates shuffle driven by
// Philox, so the same (seed, epoch) gives the same order on every machine and compiler (unlike
// std::shuffle, whose use of the engine is implementation-defined).
#pragma once

#include <cstdint>
#include <vector>

namespace headroom {

// A permutation of 0..n-1 for (seed, epoch). Each epoch draws from its own Philox stream (the
// epoch is the high half of the counter, the seed the key), so epochs differ and any epoch can be
// made without the ones before it. Indices are unbiased: Lemire's multiply-and-reject bound.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace headroom
