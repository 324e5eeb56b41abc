// The options of `headroom train` and `headroom eval`, named and defaulted as HF TrainingArguments
// (plus run_clm / TRL names for the data: max_seq_length, validation_split_percentage). Fields
// marked "headroom" are our additions. apps/ fills it from flags and config files; train/ runs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace headroom {

struct TrainingArguments {
  // What to train and on what.
  std::string model = "gpt2-tiny";  // headroom: a preset (gpt2-tiny, gpt2, llama-tiny, ...) or a
                                    // directory with config.json (+ safetensors, tokenizer files)
  std::string data;  // a text file, a directory of them, or JSONL / JSON rows (TRL's formats)
  std::string output_dir = "trainer_output";
  bool overwrite_output_dir = false;      // a fresh run into an output_dir holding checkpoints:
                                          // delete them (else refused, as HF's examples do)
  std::string device = "auto";            // headroom: auto (train/model_source.h), cpu, cuda, meta
  std::optional<int64_t> max_seq_length;  // TRL's name; unset: the model's context length
  double validation_split_percentage = 5.0;  // run_clm's held-out share of the data
  std::optional<int64_t> max_eval_samples;   // run_clm's: eval on the first N sequences of the
                                             // split (unset: all of it)
  // Rows of JSONL / JSON files are TRL's SFT data (data/sft_dataset.h), with TRL's SFTConfig
  // names: max_seq_length is also spelled max_length, TRL's name for the truncation length.
  std::string eval_data;                     // TRL's eval_dataset as a file (unset: the split)
  std::string dataset_text_field = "text";   // the language modeling rows' field
  std::string chat_template_path;            // a .jinja file overriding the model's template
  std::optional<bool> completion_only_loss;  // unset: on for prompt / completion data
  bool assistant_only_loss = false;          // score only {% generation %} tokens
  std::string eos_token;                     // appended to text rows; empty: the tokenizer's
  bool packing = false;                      // pack rows into max_length
  std::string packing_strategy = "bfd";      // bfd | wrapped
  bool padding_free = false;                 // one row per batch, no padding (forced by bfd)

  // Batches and length of training.
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  // HF's: the largest micro-batch that fits, found before training from the plan, with the
  // accumulation raised to keep the effective batch (Note [Finding the batch size from the plan]).
  bool auto_find_batch_size = false;
  int64_t gradient_accumulation_steps = 1;
  int64_t max_steps = -1;  // > 0 overrides num_train_epochs
  double num_train_epochs = 3.0;

  // Optimizer, schedule, clipping (see optim/optimizer_factory.h for `optim` names).
  std::string optim = "adamw_torch";
  std::string optim_args;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;        // 0 disables clipping
  double neftune_noise_alpha = 0.0;  // NEFTune's noise on the input embeddings (training only);
                                     // 0: none (HF's None)
  std::string lr_scheduler_type = "linear";
  double warmup_ratio = 0.0;
  int64_t warmup_steps = 0;  // > 0 overrides warmup_ratio

  // Precision and memory savers.
  bool bf16 = false;
  bool fp16 = false;
  std::string precision;  // headroom: fp32 | bf16 | fp16 | pure_bf16; overrides bf16/fp16
  bool gradient_checkpointing = false;
  std::string gradient_checkpointing_policy = "full";  // headroom: full | every_N | selective
  // Arctic's TiledMLP (memsave/tiled_mlp.h): the MLPs run over tiles of tiled_mlp_tokens tokens
  // (0: ceil(tokens / hidden) tiles).
  bool tiled_mlp = false;
  int64_t tiled_mlp_tokens = 0;
  // FP8 (Transformer Engine's recipes, with accelerate's names): the models' projection layers
  // (not lm_head) compute in FP8 (quant/fp8_linear.h), with or without bf16 autocast.
  bool fp8 = false;
  std::string fp8_recipe = "delayed";         // delayed | current | mxfp8 | block
  std::string fp8_format = "hybrid";          // hybrid | e4m3
  int64_t fp8_amax_history_len = 1024;        // delayed only
  std::string fp8_amax_compute_algo = "max";  // delayed only: max | most_recent
  int64_t fp8_margin = 0;                     // delayed only
  bool fp8_save_original_input = false;       // TE's save_original_input: keep x, not its FP8

  // LoRA (peft/), with TRL's ModelConfig names and defaults: the base is frozen and only the
  // adapters (and modules_to_save) train; output_dir and checkpoints hold PEFT's adapter files.
  bool use_peft = false;
  int64_t lora_r = 16;
  double lora_alpha = 32.0;
  double lora_dropout = 0.05;
  std::string lora_target_modules;   // comma-separated names, or all-linear; empty: the
                                     // architecture's default (PEFT's table)
  std::string lora_modules_to_save;  // comma-separated module names trained in full
  bool use_rslora = false;
  // QLoRA: a frozen 4-bit base under the adapters, with HF's BitsAndBytesConfig names and
  // defaults (TRL's use_bnb_nested_quant is bnb_4bit_use_double_quant). Needs use_peft.
  bool load_in_4bit = false;
  std::string bnb_4bit_quant_type = "fp4";  // fp4 | nf4
  bool bnb_4bit_use_double_quant = false;
  std::string bnb_4bit_compute_dtype;            // float32 | bfloat16 | float16; empty: the
                                                 // recipe's compute dtype (as TRL passes its dtype)
  std::string bnb_4bit_quant_storage = "uint8";  // uint8 | bfloat16 | float16 | float32

  // Reproducibility.
  int64_t seed = 42;
  std::optional<int64_t> data_seed;  // unset: seed

  // Logging, evaluation, checkpoints.
  int64_t logging_steps = 500;
  bool logging_first_step = false;
  std::string eval_strategy = "no";   // no | steps
  std::optional<int64_t> eval_steps;  // unset: logging_steps
  // headroom: the run ends after the first evaluation whose loss is at or below this, as it ends
  // at max_steps; 0: only max_steps / epochs end it.
  double eval_loss_target = 0.0;
  std::string save_strategy = "steps";  // no | steps
  int64_t save_steps = 500;
  std::optional<int64_t> save_total_limit;
  std::string resume_from_checkpoint;  // a checkpoint directory, or "last" (newest in output_dir)
  bool disable_tqdm = false;           // plain log lines even on a terminal
  std::string report_to = "none";      // none | all | tensorboard (integrations/report_to.h);
                                       // transformers 5's default
  std::string logging_dir;             // TensorBoard's; empty: output_dir/runs/<date>_<host>
                                       // (transformers 4's default)

  // Data loading.
  int64_t dataloader_num_workers = 0;
  std::optional<int64_t> dataloader_prefetch_factor;  // unset: 2 when there are workers
  bool dataloader_persistent_workers = false;
  bool dataloader_pin_memory = true;
  bool dataloader_drop_last = false;

  // headroom: the sample printed at the end of training.
  std::string sample_prompt = "\n";
  int64_t sample_max_new_tokens = 200;

  // headroom: torch.profiler over a few optimizer steps (output_dir/trace.json and a table of the
  // ops), with torch.profiler.schedule's fields counted in optimizer steps; and PyTorch's memory
  // snapshot of the whole run (memory_viz's pickle), written at the end or at out-of-memory.
  bool profile = false;
  int64_t profile_skip_first = 0;
  int64_t profile_wait = 1;
  int64_t profile_warmup = 1;
  int64_t profile_active = 3;
  int64_t profile_repeat = 1;   // 0: cycle until the run ends
  std::string memory_snapshot;  // the pickle's path; empty: none
  // headroom: caps the training device's memory ("24GiB"), as HEADROOM_MEMORY_LIMIT; empty: none.
  std::string memory_limit;
  // headroom: the device allocator grows one segment per stream and pool instead of caching
  // segment by segment, as HEADROOM_ALLOC_CONF=expandable_segments:True (which also turns it
  // on; Note [Expandable segments]).
  bool expandable_segments = false;

  // Data parallel (under mpirun), with DeepSpeed's names. zero_stage 0: DDP; 1: ZeRO-1, optimizer
  // states sharded over the ranks; 2: ZeRO-2, gradients too; 3: ZeRO-3, the blocks' parameters
  // too. `deepspeed`: a DeepSpeed JSON config, of which zero_optimization.stage is read (it must
  // agree with an explicit zero_stage).
  std::optional<int64_t> zero_stage;
  std::string deepspeed;
  // DDP's bucket_cap_mb (HF ddp_bucket_cap_mb): the gradient buckets' size in MiB (the first
  // bucket is 1 MiB, or this when smaller).
  double ddp_bucket_cap_mb = 25.0;
  // HF's: a step's loss is over the scored targets of every rank's micro-batches (summed over
  // the ranks), not each rank's own, when batches score different numbers (rows, packing).
  bool average_tokens_across_devices = true;

  // Offload to host memory (memsave; DeepSpeed's zero_optimization.offload_optimizer /
  // offload_param, transformers' checkpoint offload): the optimizer's states and step (a ratio of
  // the parameters), saved activations (the checkpoint inputs under gradient_checkpointing),
  // the parameters themselves; the host pool page-locked on a GPU.
  bool offload_optimizer = false;
  double offload_optimizer_ratio = 1.0;
  bool offload_activations = false;
  bool offload_params = false;
  bool offload_pin_memory = true;
};

}  // namespace headroom
