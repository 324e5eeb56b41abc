// The launcher's variables read into a LaunchEnvironment, checked.
#include "dist/launch_environment.h"

#include <cstdlib>
#include <optional>

#include "core/error.h"

namespace headroom {

namespace {

std::optional<int> integer_variable(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > (1 << 24)) {
    throw ValueError(
        str_cat(name, "='", text, "': not a non-negative integer of at most ", 1 << 24));
  }
  return static_cast<int>(value);
}

}  // namespace

LaunchEnvironment launch_environment() {
  struct Names {
    const char* rank;
    const char* world_size;
    const char* local_rank;
    const char* local_world_size;
    const char* launcher;
  };
  for (const Names& names :
       {Names{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
              "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun"},
        Names{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"}}) {
    const std::optional<int> world_size = integer_variable(names.world_size);
    if (!world_size) continue;
    LaunchEnvironment env;
    env.launcher = names.launcher;
    env.world_size = *world_size;
    env.rank = integer_variable(names.rank).value_or(0);
    env.local_rank = integer_variable(names.local_rank).value_or(env.rank);
    env.local_world_size = integer_variable(names.local_world_size).value_or(env.world_size);
    if (env.world_size < 1) throw ValueError(str_cat(names.world_size, "=0: no ranks"));
    if (env.rank >= env.world_size) {
      throw ValueError(str_cat(names.rank, "=", env.rank, " is outside 0..", env.world_size - 1,
                               " (", names.world_size, "=", env.world_size, ")"));
    }
    if (env.local_rank >= env.local_world_size) {
      throw ValueError(str_cat(names.local_rank, "=", env.local_rank, " is outside 0..",
                               env.local_world_size - 1));
    }
    return env;
  }
  return LaunchEnvironment{};
}

}  // namespace headroom
