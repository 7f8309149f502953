// Test helper for py:tensorboard_reader: writes a TensorBoard event file with known scalars
// into the directory given as argv[1] and prints the file's path.
#include <cstdio>

#include "metrics/tensorboard.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dlrun_tb_write DIR\n");
    return 2;
  }
  dlrun::metrics::TensorBoardWriter w(argv[1]);
  for (int step = 0; step <= 300; step += 100) {
    w.add_scalar("train/loss", 2.0 / (step + 1), step, 1700000000.0 + step);
    w.add_scalar("train/lr", 0.1, step, 1700000000.0 + step);
  }
  w.add_scalar("eval/accuracy", 0.875, 300, 1700000400.0);
  w.add_scalar("train/loss", -1.5, 5000000000LL, 1700000500.0);  // a step beyond int32
  w.flush();
  std::printf("%s\n", w.path().c_str());
  return 0;
}
