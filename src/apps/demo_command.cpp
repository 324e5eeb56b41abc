// The demo job: GPT-2 parameter shapes (as Hugging Face names them), mixed into a training
// state with fp32 AdamW, allocated under MemoryContext labels so the snapshot shows them.
#include "apps/demo_command.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <vector>

#include "core/tensor.h"
#include "memory/alloc_config.h"
#include "memory/device_memory.h"
#include "memory/memory_snapshot.h"

namespace headroom {
namespace {

std::vector<Shape> gpt2_parameter_shapes(const DemoOptions& o) {
  const int64_t d = o.d_model;
  std::vector<Shape> shapes = {{o.vocab, d}, {o.context, d}};  // wte, wpe
  for (int l = 0; l < o.layers; ++l) {
    for (Shape s : std::initializer_list<Shape>{{d},
                                                {d},  // ln_1
                                                {d, 3 * d},
                                                {3 * d},  // attn.c_attn (Conv1D layout)
                                                {d, d},
                                                {d},  // attn.c_proj
                                                {d},
                                                {d},  // ln_2
                                                {d, 4 * d},
                                                {4 * d},  // mlp.c_fc
                                                {4 * d, d},
                                                {d}}) {  // mlp.c_proj
      shapes.push_back(s);
    }
  }
  shapes.push_back({d});  // ln_f
  shapes.push_back({d});
  return shapes;
}

std::vector<Tensor> allocate_like(const std::vector<Shape>& shapes, Device device) {
  std::vector<Tensor> out;
  out.reserve(shapes.size());
  for (const Shape& s : shapes) out.push_back(Tensor::empty(s, DType::f32, device));
  return out;
}

}  // namespace

CLI::App* add_demo_command(CLI::App& app, DemoOptions& o) {
  CLI::App* demo = app.add_subcommand(
      "demo", "Allocate a GPT-2-shaped training state (no compute) and print the memory summary");
  demo->add_option("--device", o.device, "cpu, meta or cuda:N")->capture_default_str();
  demo->add_option("--layers", o.layers, "transformer blocks")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--d-model,--d_model", o.d_model, "hidden size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--vocab", o.vocab, "vocabulary size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--context", o.context, "sequence length")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--batch", o.batch, "micro-batch size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--memory-limit,--memory_limit", o.memory_limit,
                   "cap the device's memory, e.g. 24GiB (default: HEADROOM_MEMORY_LIMIT)");
  demo->add_option("--snapshot", o.snapshot, "write a memory_viz pickle of the run to this path");
  demo->add_flag("--abbreviated", o.abbreviated, "leave the per-pool rows out of the summary");
  demo->add_flag("--empty-cache,--empty_cache", o.empty_cache,
                 "return the memory cached after the logits are freed (torch.cuda.empty_cache) "
                 "before the summary and the snapshot");
  return demo;
}

int run_demo(const DemoOptions& o) {
  const Device device = Device::parse(o.device);
  caching_allocator(device);  // fail on an unavailable device before printing anything
  if (!o.memory_limit.empty())
    set_memory_limit(device, parse_byte_size(o.memory_limit, "--memory-limit"));
  if (!o.snapshot.empty()) record_memory_history(100000);

  const std::vector<Shape> shapes = gpt2_parameter_shapes(o);
  int64_t parameters = 0;
  for (const Shape& s : shapes) parameters += s.numel();
  std::printf("headroom demo: the training state of a GPT-2-shaped model on %s (no compute)\n",
              device.str().c_str());
  std::printf("  %d layers, d_model %lld, vocab %lld, context %lld: %lld parameters\n\n", o.layers,
              static_cast<long long>(o.d_model), static_cast<long long>(o.vocab),
              static_cast<long long>(o.context), static_cast<long long>(parameters));

  size_t last = memory_allocated(device);
  auto report = [&](const char* what) {
    const size_t now = memory_allocated(device);
    std::printf("  %-36s %12s\n", what, format_bytes(now - last).c_str());
    last = now;
  };
  std::vector<Tensor> weights, grads, exp_avg, exp_avg_sq;
  {
    MemoryContext ctx("parameters");
    weights = allocate_like(shapes, device);
  }
  report("parameters (f32)");
  {
    MemoryContext ctx("gradients");
    grads = allocate_like(shapes, device);
  }
  report("gradients (f32)");
  {
    MemoryContext ctx("optimizer.adamw");
    exp_avg = allocate_like(shapes, device);
    exp_avg_sq = allocate_like(shapes, device);
  }
  report("AdamW exp_avg + exp_avg_sq (f32)");
  {
    MemoryContext ctx("logits");
    Tensor logits = Tensor::empty({o.batch, o.context, o.vocab}, DType::f32, device);
    char label[80];
    std::snprintf(label, sizeof label, "logits [%lld, %lld, %lld] (f32)",
                  static_cast<long long>(o.batch), static_cast<long long>(o.context),
                  static_cast<long long>(o.vocab));
    report(label);
  }
  if (o.empty_cache) empty_cache(device);
  std::printf("  %-36s %12s\n", "peak allocated",
              format_bytes(max_memory_allocated(device)).c_str());
  std::printf("  %-36s %12s\n\n", "peak reserved",
              format_bytes(max_memory_reserved(device)).c_str());
  std::fputs(memory_summary(device, o.abbreviated).c_str(), stdout);
  if (!o.snapshot.empty()) {
    dump_memory_snapshot(o.snapshot);
    std::printf("\nmemory snapshot written to %s (open it at https://pytorch.org/memory_viz)\n",
                o.snapshot.c_str());
  }
  return 0;
}

}  // namespace headroom
