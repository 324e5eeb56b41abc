// The log lines of `headroom train`: an entry printed as HF prints its logs dict.
#include "train/progress.h"

#include <gtest/gtest.h>

#include <cmath>

namespace headroom {
namespace {

TEST(FormatLogLine, PrintsAnEntryAsAPythonDictWithoutTheStep) {
  nlohmann::ordered_json entry = {{"loss", 2.31415926}, {"grad_norm", nullptr}};
  entry["lr"] = 0.00029999999999999997;
  entry["epoch"] = 0.125;
  entry["step"] = 10;
  entry["loss_scale"] = 65536.0;
  entry["tokens_per_s"] = 13870.4;
  entry["peak_allocated_bytes"] = 123456;
  EXPECT_EQ(format_log_line(entry),
            "{'loss': 2.314, 'grad_norm': None, 'lr': 0.0003, 'epoch': 0.125, "
            "'loss_scale': 65536, 'tokens_per_s': 13870, 'peak_allocated_bytes': 123456}");
}

TEST(FormatLogLine, SmallAndNonFiniteValues) {
  nlohmann::ordered_json entry;
  entry["eval_loss"] = NAN;
  entry["eval_perplexity"] = INFINITY;
  entry["lr"] = 1.2345678e-05;
  entry["grad_norm"] = 4.25e-07;
  entry["eval_tokens"] = 64;
  EXPECT_EQ(format_log_line(entry),
            "{'eval_loss': nan, 'eval_perplexity': inf, 'lr': 1.23457e-05, 'grad_norm': 4.25e-07, "
            "'eval_tokens': 64}");
  EXPECT_EQ(format_log_line(nlohmann::ordered_json::object()), "{}");
  EXPECT_EQ(format_log_line({{"step", 3}}), "{}");
}

}  // namespace
}  // namespace headroom
