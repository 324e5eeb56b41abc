// `headroom train`'s whole run: the Trainer (train/trainer.h) with stop signals, the memory
// snapshot, and under mpirun one rank per process.
#pragma once

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/trainer_callback.h"
#include "train/training_arguments.h"

namespace headroom {

// Runs `headroom train` with `args` and `callbacks`: SIGINT / SIGTERM stop it after the current
// step with a checkpoint. With args.memory_snapshot it records the allocator's history from the
// start and writes the snapshot there at the end, or at an OutOfMemoryError before rethrowing it.
// Returns the process exit code: 0, or 128 + the signal (130, 143) after a stop.
// Launched by mpirun (or with torchrun's variables) with more than one rank it trains data-parallel
// (DDP, Trainer's `communicator`), one GPU per local rank; an error on any rank ends every rank
// (MPI_Abort) with a message naming it. `options` (every option's resolved value, as the command
// read them) is first compared with rank 0's on every rank: a rank started with other options
// makes every rank return 2, rank 0 printing the one line that names the option and the ranks
// (Note [Every rank runs rank 0's options]).
int run_training(const TrainingArguments& args,
                 std::vector<std::shared_ptr<TrainerCallback>> callbacks = {},
                 const nlohmann::ordered_json& options = {});

}  // namespace headroom
