// The trainer tests' setup: a byte-level GPT-2 small enough for a step in milliseconds, saved as
// a model directory (config only: HF initialisation from the seed), and the tiny text as data.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "io/hf_config.h"
#include "nn/tiny_text.h"
#include "train/training_arguments.h"

namespace headroom::test_data {

// A fresh directory under the system's temp dir, removed with the object.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("headroom_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Writes model/config.json and data.txt under `root` and returns arguments for a short run:
// context 16, batch 4, lr 3e-3, 4 steps with 2 of warmup, logging every step, a checkpoint
// every 2, no sample. `dropout` exercises the generator state that checkpoints carry; n_layer
// (2) deepens the model where blocks are what a test counts.
inline TrainingArguments tiny_training_args(const std::filesystem::path& root, double dropout = 0.1,
                                            int64_t n_layer = 2) {
  GPT2Config config = tiny_text_gpt2();
  config.n_positions = 16;
  config.n_layer = n_layer;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = dropout;
  config.bos_token_id = std::nullopt;
  config.eos_token_id = {};
  std::filesystem::create_directories(root / "model");
  write_hf_config((root / "model").string(), config);
  std::ofstream((root / "data.txt").string()) << kTinyText << "\n"
                                              << kTinyText << "\n"
                                              << kTinyText << "\n";
  TrainingArguments args;
  args.model = (root / "model").string();
  args.data = (root / "data.txt").string();
  args.output_dir = (root / "out").string();
  args.device = "cpu";
  args.max_seq_length = 16;
  args.per_device_train_batch_size = 4;
  args.per_device_eval_batch_size = 4;
  args.max_steps = 4;
  args.learning_rate = 3e-3;
  args.warmup_steps = 2;
  args.logging_steps = 1;
  args.save_steps = 2;
  args.disable_tqdm = true;
  args.sample_max_new_tokens = 0;
  return args;
}

}  // namespace headroom::test_data
