// The terminal progress display: a redrawn bar on a TTY, plain periodic lines otherwise.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "config/options.h"

namespace dlrun::metrics {

/// One progress line: "step 120/1000 (12%) | epoch 1 | loss 0.4321 | 1234.5 img/s | lr 0.1
/// | ETA 1m23s". total <= 0: unknown (no percentage, no ETA); eta_s < 0: no ETA; a NaN loss
/// (not read from the device yet) is left out.
std::string format_progress(int64_t step, int64_t total, int64_t epoch, double loss,
                            double img_per_s, double lr, double eta_s);
/// "45s", "3m07s", "2h05m"; "?" for a negative or non-finite value.
std::string format_duration(double seconds);

/// mode: auto (bar when `out` is a TTY, else lines) | bar | lines (a line when
/// step % every_steps == 0 and at the last step) | none (prints nothing at all, messages
/// included). The ETA is measured from the first update, so a resumed run's speed is not
/// skewed by the steps it skipped.
class Progress {
 public:
  Progress(ProgressMode mode, int64_t total_steps, int64_t every_steps, std::FILE* out = stderr);
  /// True when drawing a bar (worth updating every step); false for lines and none.
  bool is_bar() const { return bar_ && enabled_; }
  void update(int64_t step, int64_t epoch, double loss, double img_per_s, double lr);
  void message(const std::string& line);  ///< print a line without breaking the bar
  void finish();                          ///< end the bar's line (call once at the end)

 private:
  bool bar_ = false;
  bool enabled_ = true;
  int64_t total_ = 0, every_ = 1;
  double start_ = 0;
  bool drawn_ = false;
  std::FILE* out_ = stderr;
  int64_t first_step_ = -1;  ///< step of the first update (ETA baseline)
  double last_draw_ = 0;     ///< mono_now() of the last bar redraw (redraws are rate-limited)
  std::string last_;         ///< the bar as last drawn, redrawn after message()
};

}  // namespace dlrun::metrics
