// The state files of a checkpoint, each applied as a resume applies it (inside
// with_checkpoint_file, which names the file in any exception). The first byte picks the file,
// the rest is its JSON:
//   0 optimizer.safetensors' metadata (the optimizer its "optimizer" field names, else the one the
//     second byte picks; its state tensors are those of a real step), loaded by
//     Optimizer::load_state_dict
//   1 scheduler.json, loaded by LRScheduler::load_state_dict
//   2 scaler.json, loaded by GradScaler::load_state_dict
//   3 rng_state.json and 4 trainer_state.json, read by read_checkpoint from a checkpoint whose
//     other files are valid (rng_state's "data" then by DataLoaderState::from_json).
// HEADROOM_FUZZ_WRITE_SEEDS=DIR writes one valid input per file and optimizer into DIR and exits.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "amp/grad_scaler.h"
#include "autograd/engine.h"
#include "core/tensor.h"
#include "data/data_loader.h"
#include "fuzz_support.h"
#include "core/json_file.h"
#include "io/safetensors.h"
#include "ops/ops.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer_factory.h"
#include "train/checkpoint.h"

namespace {

using namespace headroom;
namespace fs = std::filesystem;

struct Templates {
  std::vector<NamedTensor> params;
  std::vector<std::string> optimizers;
  std::vector<OptimizerStateDict> states;  // one per optimizer, after a step
  nlohmann::json scheduler, scaler, rng, trainer_state;
  std::string checkpoint_dir;
};

std::unique_ptr<Optimizer> make(const Templates& t, size_t which) {
  OptimizerArguments args;
  args.optim = t.optimizers[which];
  args.learning_rate = 1e-3;
  return make_optimizer(args, t.params);
}

std::unique_ptr<Templates> build_templates() {
  auto t = std::make_unique<Templates>();
  t->params = {{"w", Tensor::randn({4, 3}).set_requires_grad(true)},
               {"b", Tensor::zeros({3}).set_requires_grad(true)}};
  // Every optimizer that steps on plain gradients (LOMO fuses its update into backward).
  for (const std::string& name : optimizer_names()) {
    t->optimizers.push_back(name);
    try {
      std::unique_ptr<Optimizer> optimizer = make(*t, t->optimizers.size() - 1);
      backward(sum(mul(add(t->params[0].second, t->params[1].second), t->params[0].second)));
      optimizer->step();
      optimizer->zero_grad();
      t->states.push_back(optimizer->state_dict());
    } catch (const Error&) {
      t->optimizers.pop_back();
    }
  }
  std::unique_ptr<Optimizer> optimizer = make(*t, 0);
  LRScheduler scheduler(*optimizer, {.num_warmup_steps = 2, .num_training_steps = 10});
  scheduler.step();
  t->scheduler = scheduler.state_dict();
  t->scaler = GradScaler(GradScalerOptions{.enabled = true}).state_dict();
  t->rng = {{"generator", {{"seed", 42}, {"offset", 8}}},
            {"data",
             {{"epoch", 0},
              {"batch_index", 3},
              {"seed", 42},
              {"seq_length", 16},
              {"train_sequences", 20}}}};
  t->trainer_state = {{"global_step", 3},
                      {"log_history", nlohmann::json::array({{{"loss", 2.5}, {"step", 1}}})}};

  t->checkpoint_dir = (fs::path(fuzz::scratch_dir()) / "checkpoint-3").string();
  fs::create_directories(t->checkpoint_dir);
  const fs::path root(t->checkpoint_dir);
  fuzz::write_scratch_file("checkpoint-3/config.json", "{\"model_type\": \"gpt2\"}");
  save_safetensors((root / "model.safetensors").string(), {{"w", Tensor::ones({2})}});
  save_safetensors((root / kOptimizerFile).string(), t->states[0].tensors,
                   {{kOptimizerMetaKey, t->states[0].meta.dump()}});
  fuzz::write_scratch_file(str_cat("checkpoint-3/", kSchedulerFile), t->scheduler.dump());
  fuzz::write_scratch_file(str_cat("checkpoint-3/", kRngStateFile), t->rng.dump());
  fuzz::write_scratch_file(str_cat("checkpoint-3/", kTrainerStateFile), t->trainer_state.dump());
  return t;
}

void write_seeds(const Templates& t, const std::string& dir) {
  fs::create_directories(dir);
  auto seed = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(fs::path(dir) / name, std::ios::binary) << bytes;
  };
  for (size_t i = 0; i < t.optimizers.size(); ++i) {
    seed("optimizer_" + t.optimizers[i],
         std::string{'\0', static_cast<char>(i)} + t.states[i].meta.dump());
  }
  seed("scheduler", std::string{'\1'} + t.scheduler.dump());
  seed("scaler", std::string{'\2'} + t.scaler.dump());
  seed("rng_state", std::string{'\3'} + t.rng.dump());
  seed("trainer_state", std::string{'\4'} + t.trainer_state.dump());
}

const Templates& templates() {
  static const std::unique_ptr<Templates> t = build_templates();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("HEADROOM_FUZZ_WRITE_SEEDS")) {
    write_seeds(templates(), dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Templates& t = templates();
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: {
      const std::string_view meta = text.substr(1);
      fuzz::expect_typed_errors([&] {
        const nlohmann::json parsed = parse_json(meta, "optimizer metadata");
        // The optimizer the metadata names when it names one headroom builds (so that seeds
        // keep their optimizer when the list grows), else the one the second byte picks.
        size_t which = data[1] % t.optimizers.size();
        if (parsed.is_object() && parsed.contains("optimizer") && parsed["optimizer"].is_string()) {
          const auto named = std::find(t.optimizers.begin(), t.optimizers.end(),
                                       parsed["optimizer"].get<std::string>());
          if (named != t.optimizers.end()) {
            which = static_cast<size_t>(named - t.optimizers.begin());
          }
        }
        std::unique_ptr<Optimizer> optimizer = make(t, which);
        OptimizerStateDict state{parsed, t.states[which].tensors};
        with_checkpoint_file(kOptimizerFile, [&] { optimizer->load_state_dict(state); });
      });
      break;
    }
    case 1:
      fuzz::expect_typed_errors([&] {
        std::unique_ptr<Optimizer> optimizer = make(t, 0);
        LRScheduler scheduler(*optimizer, {.num_warmup_steps = 2, .num_training_steps = 10});
        with_checkpoint_file(kSchedulerFile, [&] {
          scheduler.load_state_dict(parse_json(text, kSchedulerFile));
          scheduler.step();
        });
      });
      break;
    case 2:
      fuzz::expect_typed_errors([&] {
        with_checkpoint_file(kScalerFile, [&] {
          GradScaler(GradScalerOptions{.enabled = true})
              .load_state_dict(parse_json(text, kScalerFile));
        });
      });
      break;
    default: {
      const bool rng = data[0] % 5 == 3;
      const char* name = rng ? kRngStateFile : kTrainerStateFile;
      fuzz::write_scratch_file(str_cat("checkpoint-3/", name), text);
      fuzz::expect_typed_errors([&] {
        const CheckpointContents contents = read_checkpoint(t.checkpoint_dir, false, kCPU);
        if (rng) (void)DataLoaderState::from_json(contents.rng_state.at("data"), name);
      });
      fuzz::write_scratch_file(str_cat("checkpoint-3/", name),
                               (rng ? t.rng : t.trainer_state).dump());
      break;
    }
  }
  return 0;
}
