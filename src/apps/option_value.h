// Option values written as text (on the command line): integers, numbers and HF's booleans, read
// strictly so that `--per_device_train_batch_size 8x` is an error naming the option, not 8.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/text_value.h"

namespace headroom {

// `where` names the option in errors ("--max_steps", "run.toml: max_steps").
int64_t parse_integer_value(std::string_view text, std::string_view where);
// A finite number: "5e-5", "0.9", "3".
double parse_real_value(std::string_view text, std::string_view where);
// HF's string_to_bool: yes/no, true/false, t/f, y/n, 1/0, any case.
bool parse_bool_value(std::string_view text, std::string_view where);

// The shortest text that reads back as `value` ("5e-05", "0.9", "3"), as Python's repr prints it.
std::string format_real(double value);

}  // namespace headroom
