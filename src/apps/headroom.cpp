// The `headroom` command. Errors print on one line: usage errors exit 2, others 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "apps/demo_command.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"headroom: train transformer models in as little GPU memory as possible"};
  app.set_version_flag("--version", "headroom 0.1.0");
  app.require_subcommand(1);
  headroom::DemoOptions demo;
  CLI::App* demo_command = headroom::add_demo_command(app, demo);
  try {
    app.parse(argc, argv);
    if (demo_command->parsed()) return headroom::run_demo(demo);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "headroom: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const headroom::ValueError& e) {
    std::fprintf(stderr, "headroom: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headroom: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
