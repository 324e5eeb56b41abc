// Parsing of allocator options and byte sizes.
#include "memory/alloc_config.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace headroom {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

double parse_number(std::string_view text, const std::string& what) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    throw ValueError(str_cat(what, ": '", text, "' is not a number"));
  }
  return v;
}

}  // namespace

AllocatorConfig AllocatorConfig::parse(std::string_view text, const char* source) {
  AllocatorConfig config;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      throw ValueError(str_cat(source, ": option '", item, "' needs the form key:value"));
    }
    const std::string_view key = trim(item.substr(0, colon));
    const std::string_view value = trim(item.substr(colon + 1));
    const std::string what = str_cat(source, ": ", key);
    if (key == "max_split_size_mb") {
      const double mb = parse_number(value, what);
      // PyTorch's lower bound: a large segment (20 MiB) must stay splittable.
      if (mb <= 20) {
        throw ValueError(str_cat(what, " is ", value, " but must be greater than 20"));
      }
      config.max_split_size = static_cast<size_t>(mb) << 20;
    } else if (key == "max_non_split_rounding_mb") {
      const double mb = parse_number(value, what);
      if (mb < 0) throw ValueError(str_cat(what, " is ", value, " but must be >= 0"));
      config.max_non_split_rounding_size = static_cast<size_t>(mb) << 20;
    } else if (key == "garbage_collection_threshold") {
      const double t = parse_number(value, what);
      if (!(t > 0 && t < 1)) {
        throw ValueError(str_cat(what, " is ", value, " but must be in (0, 1)"));
      }
      config.garbage_collection_threshold = t;
    } else if (key == "roundup_power2_divisions") {
      const double d = parse_number(value, what);
      const size_t n = static_cast<size_t>(d);
      if (d != static_cast<double>(n) || (n > 1 && (n & (n - 1)) != 0)) {
        throw ValueError(str_cat(what, " is ", value,
                                 " but must be 0, 1 or a power of two (the per-size-range list "
                                 "form is not supported)"));
      }
      config.roundup_power2_divisions = n;
    } else if (key == "expandable_segments") {
      if (value == "True" || value == "true" || value == "1") {
        config.expandable_segments = true;
      } else if (value == "False" || value == "false" || value == "0") {
        config.expandable_segments = false;
      } else {
        throw ValueError(str_cat(what, " is '", value, "' but must be True or False"));
      }
    } else if (key == "backend") {
      if (value != "native") {
        throw ValueError(str_cat(what, " is '", value, "' but only 'native' is supported"));
      }
    } else {
      throw ValueError(str_cat(source, ": unknown option '", key,
                               "' (known: max_split_size_mb, max_non_split_rounding_mb, "
                               "garbage_collection_threshold, roundup_power2_divisions, "
                               "expandable_segments, backend)"));
    }
  }
  return config;
}

AllocatorConfig AllocatorConfig::from_env() {
  for (const char* name : {"HEADROOM_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    if (const char* text = std::getenv(name)) return parse(text, name);
  }
  return AllocatorConfig{};
}

std::string AllocatorConfig::str() const {
  std::string out;
  if (max_split_size != std::numeric_limits<size_t>::max()) {
    out += str_cat("max_split_size_mb:", max_split_size >> 20, ",");
  }
  if (max_non_split_rounding_size != (20u << 20)) {
    out += str_cat("max_non_split_rounding_mb:", max_non_split_rounding_size >> 20, ",");
  }
  if (garbage_collection_threshold > 0) {
    out += str_cat("garbage_collection_threshold:", garbage_collection_threshold, ",");
  }
  if (roundup_power2_divisions > 1) {
    out += str_cat("roundup_power2_divisions:", roundup_power2_divisions, ",");
  }
  if (expandable_segments) out += "expandable_segments:True,";
  if (!out.empty()) out.pop_back();
  return out;
}

size_t parse_byte_size(std::string_view text, const char* what) {
  const std::string_view s = trim(text);
  size_t split = 0;
  while (split < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[split])) || s[split] == '.')) {
    ++split;
  }
  const std::string_view number = s.substr(0, split);
  std::string unit(trim(s.substr(split)));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  struct Unit {
    const char* name;
    double factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1.0},
      {"b", 1.0},
      {"k", 1024.0},
      {"kib", 1024.0},
      {"kb", 1e3},
      {"m", 1048576.0},
      {"mib", 1048576.0},
      {"mb", 1e6},
      {"g", 1073741824.0},
      {"gib", 1073741824.0},
      {"gb", 1e9},
      {"t", 1099511627776.0},
      {"tib", 1099511627776.0},
      {"tb", 1e12},
  };
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    if (number.empty()) break;
    const double bytes = parse_number(number, what) * u.factor;
    if (bytes > 1.8e19) break;
    return static_cast<size_t>(std::llround(bytes));
  }
  throw ValueError(
      str_cat(what, ": '", text, "' is not a byte size (examples: 24GiB, 512MiB, 80GB, 1048576)"));
}

size_t memory_limit_from_env() {
  const char* text = std::getenv("HEADROOM_MEMORY_LIMIT");
  if (!text || !*text) return 0;
  return parse_byte_size(text, "HEADROOM_MEMORY_LIMIT");
}

std::string format_bytes(size_t size) {
  char buf[64];
  if (size <= 1024) {
    std::snprintf(buf, sizeof buf, "%zu bytes", size);
  } else if (size <= 1048576) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(size) / 1024.0);
  } else if (size <= 1073741824ull) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(size) / 1048576.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(size) / 1073741824.0);
  }
  return buf;
}

}  // namespace headroom
