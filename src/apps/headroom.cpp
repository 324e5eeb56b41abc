// The `headroom` command. Errors print on one line, `headroom: error: ...`: usage errors and bad
// values (CLI11 parse errors, ValueError) exit 2, everything else 1.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "apps/demo_command.h"
#include "apps/eval_command.h"
#include "apps/merge_command.h"
#include "apps/plan_command.h"
#include "apps/train_command.h"
#include "apps/unknown_option.h"
#include "backend/cpu/openmp_spin.h"
#include "core/error.h"

namespace {

int report_error(std::string message, const char* suffix, int exit_code) {
  std::replace(message.begin(), message.end(), '\n', ' ');  // one line, whatever the source
  std::fprintf(stderr, "headroom: error: %s%s\n", message.c_str(), suffix);
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  headroom::cpu::restart_with_openmp_spin_count(argv);  // see Note [OpenMP spin-waiting]
  CLI::App app{"headroom: train transformer models in as little GPU memory as possible"};
  app.set_version_flag("--version", "headroom 0.1.0");
  app.require_subcommand(1);
  headroom::DemoOptions demo;
  CLI::App* demo_command = headroom::add_demo_command(app, demo);
  CLI::App* train_command = headroom::add_train_command(app);
  headroom::EvalOptions eval;
  CLI::App* eval_command = headroom::add_eval_command(app, eval);
  headroom::MergeOptions merge;
  CLI::App* merge_command = headroom::add_merge_command(app, merge);
  headroom::PlanOptions plan;
  CLI::App* plan_command = headroom::add_plan_command(app, plan);
  try {
    app.parse(argc, argv);
    if (demo_command->parsed()) return headroom::run_demo(demo);
    if (train_command->parsed()) return headroom::run_train_command(*train_command);
    if (eval_command->parsed()) return headroom::run_eval(eval);
    if (merge_command->parsed()) return headroom::run_merge(merge);
    if (plan_command->parsed()) return headroom::run_plan_command(*plan_command, plan);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    // Named by the subcommand whose options they missed, with the nearest option name.
    const CLI::App* command = &app;
    for (const CLI::App* sub : app.get_subcommands()) command = sub;
    return report_error(headroom::unexpected_arguments_message(*command, app.remaining(true)),
                        " (see --help)", 2);
  } catch (const CLI::ParseError& e) {
    return report_error(e.what(), " (see --help)", 2);
  } catch (const headroom::ValueError& e) {
    return report_error(e.what(), "", 2);
  } catch (const std::exception& e) {
    return report_error(e.what(), "", 1);
  }
  return 0;
}
