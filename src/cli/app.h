// The dlrun command line: one CLI11 app, one file per subcommand (cmd_*.cpp).
#pragma once

namespace CLI {
class App;
}

namespace dlrun::cli {

/// Parse argv, run the chosen subcommand, and map every error to the exit codes of README.md.
int main(int argc, char** argv);

// Subcommand registration; each lives in its own cmd_<name>.cpp.
void setup_info(CLI::App& app);
void setup_config(CLI::App& app);
void setup_train(CLI::App& app);
void setup_eval(CLI::App& app);
void setup_predict(CLI::App& app);
void setup_bench(CLI::App& app);
void setup_bench_data(CLI::App* bench);     ///< `dlrun bench data` (cmd_bench_data.cpp)
void setup_bench_kernels(CLI::App* bench);  ///< `dlrun bench kernels` (cmd_bench_kernels.cpp)
void setup_ckpt(CLI::App& app);
void setup_export(CLI::App& app);
void setup_data(CLI::App& app);
void setup_check_resume(CLI::App& app);  ///< `dlrun check-resume` (cmd_check_resume.cpp)
void setup_models(CLI::App& app);        ///< `dlrun models` (cmd_models.cpp)

}  // namespace dlrun::cli
