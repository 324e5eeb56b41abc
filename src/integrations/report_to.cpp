// --report_to's values and the default TensorBoard log directory.
#include "integrations/report_to.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <sstream>

#include "core/error.h"

namespace headroom {

ReportTo parse_report_to(const std::string& text) {
  ReportTo report;
  if (text == "none") return report;
  if (text == "all") return {.tensorboard = true};
  std::stringstream names(text);
  for (std::string name; std::getline(names, name, ',');) {
    if (name == "tensorboard") {
      report.tensorboard = true;
    } else {
      throw ValueError(str_cat("unknown integration '", name, "' in '", text,
                               "' (tensorboard, or all, or none)"));
    }
  }
  return report;
}

std::string default_logging_dir(const std::string& output_dir) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char when[32];
  std::strftime(when, sizeof when, "%b%d_%H-%M-%S", &local);
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return (std::filesystem::path(output_dir) / "runs" / str_cat(when, "_", host)).string();
}

}  // namespace headroom
