// Under mpirun, whether every rank was started with rank 0's options, checked before training.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"

namespace headroom {

// Note [Every rank runs rank 0's options]
// mpirun can start ranks with different command lines (its MPMD form `-np 1 a : -np 1 b`, or a
// wrapper that varies an option): ranks given another max_steps or save_steps then wait forever
// in a collective the others never enter, another model ends in a bare MPI_ERR_TRUNCATE, and
// another data file or learning rate trains on, diverging. So rank 0's options (`options`: every
// option's resolved value, an object) go to every rank first; each compares them with its own,
// field by field, and the lowest rank that differs says where, to all. Returns "" when every rank
// has rank 0's options; else, on every rank, one line naming the first option that differs, its
// value there and on rank 0, and every rank that differs. A collective: every rank calls it.
std::string rank_options_difference(Communicator& world, const nlohmann::ordered_json& options);

}  // namespace headroom
