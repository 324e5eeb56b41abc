// Exceptions thrown by every layer. A message names the thing at fault (file, field, argument),
// the value it had and the limit it broke, so the CLI can print it on one line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace headroom {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad argument, option or file content.
class ValueError : public Error {
 public:
  using Error::Error;
};

// An index or dimension outside its range.
class IndexError : public Error {
 public:
  using Error::Error;
};

// A feature this build or this device does not provide (e.g. CUDA in a CPU-only build).
class NotImplementedError : public Error {
 public:
  using Error::Error;
};

// A device ran out of memory (or over its capacity limit). Thrown by the CachingAllocator.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A broken invariant of headroom's own code (HEADROOM_INTERNAL_ASSERT): a bug, never a user's
// mistake; the message names the source line.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Concatenates anything streamable; used to build error messages.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace headroom

#define HEADROOM_CHECK(cond, ...)                                           \
  do {                                                                      \
    if (!(cond)) throw ::headroom::Error(::headroom::str_cat(__VA_ARGS__)); \
  } while (0)

#define HEADROOM_CHECK_VALUE(cond, ...)                                          \
  do {                                                                           \
    if (!(cond)) throw ::headroom::ValueError(::headroom::str_cat(__VA_ARGS__)); \
  } while (0)

// For invariants that only a bug in headroom can break (user errors use HEADROOM_CHECK_VALUE and
// name the option or file): InternalError "internal error at FILE:LINE (COND): MESSAGE; this is
// a bug in headroom".
#define HEADROOM_INTERNAL_ASSERT(cond, ...)                                                        \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      throw ::headroom::InternalError(::headroom::str_cat("internal error at ", __FILE__, ":",     \
                                                          __LINE__, " (" #cond "): ", __VA_ARGS__, \
                                                          "; this is a bug in headroom"));         \
    }                                                                                              \
  } while (0)
