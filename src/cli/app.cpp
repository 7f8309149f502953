// Entry point of the CLI: builds the app, dispatches, maps errors to exit codes.
#include "cli/app.h"

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <cstdio>
#include <string>

#include "base/build_info.h"
#include "base/error.h"
#include "base/log.h"
#include "checkpoint/remote_store.h"
#include "preempt/preempt.h"
#include "remote/s3.h"

namespace dlrun::cli {

namespace {
void print_error(const Error& e) {
  const char* kind = e.code() == ExitCode::kBadInput ? "error" : "fatal";
  std::fprintf(stderr, "dlrun: %s: %s\n", kind, e.render().c_str());
}

// CLI11 reports `dlrun frobnicate` as "A subcommand is required"; name the word instead.
bool report_unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  const CLI::App* cur = &app;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    auto subs = cur->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return false;  // a leaf command: the rest are its arguments
    const CLI::App* next = nullptr;
    std::string names;
    for (const auto* s : subs) {
      if (s->check_name(arg)) next = s;
      names += (names.empty() ? "" : ", ") + s->get_name();
    }
    if (!next) {
      std::fprintf(stderr, "dlrun: error: unknown subcommand '%s' (valid: %s)\n", arg.c_str(), names.c_str());
      return true;
    }
    cur = next;
  }
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  // The executable caught SIGTERM/SIGUSR1/SIGINT from its first instruction (src/main.cpp); only
  // `dlrun train` acts on them. Every other command gets the default actions back (and ends by
  // a signal that came while it was loading).
  if (argc < 2 || std::string(argv[1]) != "train") preempt::release_early_signal_handlers();
  log::init_from_env();
  CLI::App app{"dlrun — train image models from a YAML experiment file (LibTorch)", "dlrun"};
  app.set_version_flag("--version", build::version_line());
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 finished, 1 runtime failure, 2 bad input (usage, config, data, checkpoint),\n"
      "75 interrupted with a committed checkpoint (safe to requeue). See README.md.");
  setup_info(app);
  setup_config(app);
  setup_train(app);
  setup_eval(app);
  setup_predict(app);
  setup_bench(app);
  setup_ckpt(app);
  setup_export(app);
  setup_data(app);
  setup_check_resume(app);
  setup_models(app);
  // A dispatcher error from LibTorch (CUDA out of memory, a shape mismatch) is a runtime
  // failure; everything else is mapped by its dlrun::Error code.
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help / --version
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a subcommand's own non-zero exit (train: 75 when preempted)
  } catch (const CLI::ParseError& e) {
    if (!report_unknown_subcommand(app, argc, argv)) app.exit(e);
    return static_cast<int>(ExitCode::kBadInput);
  } catch (const Error& e) {
    print_error(e);
    return static_cast<int>(e.code());
  } catch (const remote::S3Error& e) {
    // Object storage that answered "no" (credentials, bucket, key) is bad input; one that did
    // not answer, or failed on its side, is a runtime failure worth retrying.
    const bool bad = !e.transient() && e.code() != remote::kCancelled;
    std::fprintf(stderr, "dlrun: %s: %s\n  hint: %s\n", bad ? "error" : "fatal", e.what(), ckpt::remote_hint(e).c_str());
    return static_cast<int>(bad ? ExitCode::kBadInput : ExitCode::kRuntime);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "dlrun: fatal: torch: %s\n", e.what_without_backtrace());
    return static_cast<int>(ExitCode::kRuntime);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlrun: fatal: %s\n", e.what());
    return static_cast<int>(ExitCode::kRuntime);
  }
  return 0;
}

}  // namespace dlrun::cli
