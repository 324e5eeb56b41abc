// run_training: `headroom train` around the Trainer.
#include "train/run_training.h"

#include <cstdio>
#include <exception>
#include <memory>

#include "core/error.h"
#include "dist/launch_environment.h"
#include "dist/mpi_communicator.h"
#include "dist/rank_options.h"
#include "memory/memory_history.h"
#include "memory/memory_snapshot.h"
#include "train/deepspeed_config.h"
#include "train/stop_signals.h"
#include "train/trainer.h"

namespace headroom {

int run_training(const TrainingArguments& args,
                 std::vector<std::shared_ptr<TrainerCallback>> callbacks,
                 const nlohmann::ordered_json& options) {
  // Before the Trainer starts any thread (Note [Stop signals are taken by one thread]).
  const StopSignalWatcher stop_signals;
  const LaunchEnvironment launch = launch_environment();
  if (!args.deepspeed.empty() && launch.rank == 0) {
    // What the file asks for that headroom does not do is said, not dropped silently.
    const std::string warning =
        deepspeed_ignored_keys_warning(args.deepspeed, read_deepspeed_config(args.deepspeed));
    if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
  }
  TrainingConfig config;
  try {
    config = resolve_training_config(args);
  } catch (const std::exception& e) {
    if (launch.distributed()) abort_mpi_job(e.what(), 1);  // the other ranks would wait for it
    throw;
  }
  if (launch.distributed()) {
    // One process per GPU: local rank k trains on cuda:k.
    if (config.device.is_cuda()) {
      config.device.index = launch.local_rank;
      config.args.device = str_cat("cuda:", launch.local_rank);
    }
    try {
      std::shared_ptr<Communicator> communicator = make_communicator(launch, config.device);
      if (!options.empty()) {
        // Note [Every rank runs rank 0's options]: before any rank can wait for another.
        const std::string difference = rank_options_difference(*communicator, options);
        if (!difference.empty()) {
          if (launch.rank == 0) std::fprintf(stderr, "headroom: error: %s\n", difference.c_str());
          return 2;
        }
      }
      Trainer trainer(std::move(config), {}, communicator);
      for (auto& callback : callbacks) trainer.add_callback(std::move(callback));
      return trainer.train();
    } catch (const std::exception& e) {
      // The other ranks may wait in a collective for this one: end them all now.
      abort_mpi_job(e.what(), 1);
    }
  }
  auto train = [&](std::unique_ptr<Trainer>& trainer) {
    trainer = std::make_unique<Trainer>(std::move(config));
    for (auto& callback : callbacks) trainer->add_callback(std::move(callback));
    return trainer->train();
  };
  std::unique_ptr<Trainer> trainer;
  if (args.memory_snapshot.empty()) return train(trainer);

  // torch.cuda.memory._record_memory_history() before the model exists, so that the snapshot
  // holds every allocation of the run (the last 100000 events per device).
  record_memory_history();
  struct StopRecording {
    ~StopRecording() { record_memory_history(0); }
  } stop_recording;
  int code = 0;
  try {
    code = train(trainer);
  } catch (const OutOfMemoryError&) {
    // The trainer is still alive here: its parameters, gradients and optimizer states are in the
    // snapshot's segments, and the step's allocations up to the failed one in its history.
    try {
      dump_memory_snapshot(args.memory_snapshot);
      std::fprintf(stderr, "headroom: memory snapshot at out-of-memory written to %s\n",
                   args.memory_snapshot.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "headroom: warning: no memory snapshot: %s\n", e.what());
    }
    throw;
  }
  dump_memory_snapshot(args.memory_snapshot);
  std::printf("Memory snapshot written to %s (open it in https://pytorch.org/memory_viz)\n",
              args.memory_snapshot.c_str());
  return code;
}

}  // namespace headroom
