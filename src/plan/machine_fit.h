// Whether a training run fits the memory this machine has, known from its dry run before the
// run allocates anything.
#pragma once

#include <string>

#include "train/training_arguments.h"

namespace headroom {

// Note [A run that cannot fit is refused before it allocates]
// A size that needs more memory than the machine has (an fp8_amax_history_len of 1e9, a batch
// far past the card) would otherwise allocate until the allocator's out-of-memory error on a
// GPU, or on the CPU until the kernel's OOM killer ends the process: no error line, no
// checkpoint. The dry run knows the run's peaks before anything is made (no weights are read,
// a fraction of a second even for 70B), so `headroom train` runs it first on one process and
// refuses a run whose device peak exceeds the device's free memory, or whose host pool
// (offload) the host's available memory, naming both and `headroom plan`. --memory_limit is not
// the machine: a run under a cap fails at the cap as before (it is what the cap is for).
// ValueError naming the bytes needed and available.
void check_run_fits_the_machine(const TrainingArguments& args);

// Note [Finding the batch size from the plan]
// HF's auto_find_batch_size halves the batch after each out-of-memory error and keeps the
// accumulation, so the effective batch shrinks with it. Here the batch is found before training
// from dry runs, and the effective batch (per_device_train_batch_size x
// gradient_accumulation_steps) is kept: of the micro-batches that divide it, from the largest
// down, the first whose dry run completes under the memory the run will have (memory_limit when
// set, else the device's free memory; on the CPU the host's available memory), freeing the cache
// and retrying as the real allocator does (Note [Planning under the card's capacity]); the
// accumulation takes the rest. `args` returned with the two set, and `why` told the choice.
// ValueError when even a micro-batch of 1 does not fit.
TrainingArguments find_batch_size(const TrainingArguments& args, std::string* why = nullptr);

}  // namespace headroom
