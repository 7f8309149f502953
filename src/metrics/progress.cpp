// The terminal progress display. On a TTY one bar line is redrawn in place with '\r';
// otherwise (logs, CI, `lines`) a plain line is printed every `every_steps` steps, so
// redirected output stays readable. Everything goes to stderr: stdout is kept for
// machine-readable output.
#include "metrics/progress.h"

#include <unistd.h>

#include <cmath>

#include "base/clock.h"
#include "base/error.h"

namespace dlrun::metrics {
namespace {

constexpr int kBarWidth = 20;
constexpr double kRedrawInterval = 0.1;  // seconds between bar redraws (steps can be ~ms)

std::string format_lr(double lr) { return fmt::format("{:.3g}", lr); }

}  // namespace

std::string format_duration(double s) {
  if (!(s >= 0) || std::isinf(s)) return "?";
  int64_t t = int64_t(s + 0.5);
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
}

std::string format_progress(int64_t step, int64_t total, int64_t epoch, double loss,
                            double img_per_s, double lr, double eta_s) {
  std::string s = total > 0 ? fmt::format("step {}/{} ({}%)", step, total, step * 100 / total)
                            : fmt::format("step {}", step);
  s += fmt::format(" | epoch {}", epoch);
  if (!std::isnan(loss)) s += fmt::format(" | loss {:.4f}", loss);
  s += fmt::format(" | {:.1f} img/s | lr {}", img_per_s, format_lr(lr));
  if (total > 0 && eta_s >= 0) s += " | ETA " + format_duration(eta_s);
  return s;
}

Progress::Progress(ProgressMode mode, int64_t total_steps, int64_t every_steps, std::FILE* out)
    : total_(total_steps), every_(every_steps > 0 ? every_steps : 1), out_(out) {
  switch (mode) {
    case ProgressMode::kNone: enabled_ = false; break;
    case ProgressMode::kBar: bar_ = true; break;
    case ProgressMode::kAuto: bar_ = ::isatty(::fileno(out_)) == 1; break;
    case ProgressMode::kLines: break;
  }
  start_ = mono_now();
}

void Progress::update(int64_t step, int64_t epoch, double loss, double img_per_s, double lr) {
  if (!enabled_) return;
  const double now = mono_now();
  if (first_step_ < 0) {  // a resumed run starts mid-way: measure speed from here
    first_step_ = step;
    start_ = now;
  }
  const bool last = total_ > 0 && step >= total_;
  if (bar_) {
    if (drawn_ && !last && now - last_draw_ < kRedrawInterval) return;
  } else if (step % every_ != 0 && !last) {
    return;
  }
  double eta = -1;
  if (step > first_step_ && total_ > 0)
    eta = (now - start_) / double(step - first_step_) * double(std::max<int64_t>(total_ - step, 0));
  const std::string text = format_progress(step, total_, epoch, loss, img_per_s, lr, eta);
  if (!bar_) {
    std::fprintf(out_, "%s\n", text.c_str());
    std::fflush(out_);
    return;
  }
  std::string bar;
  if (total_ > 0) {
    int filled = int(std::min<int64_t>(step, total_) * kBarWidth / total_);
    bar = "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + "] ";
  }
  last_ = bar + text;
  last_draw_ = now;
  drawn_ = true;
  std::fprintf(out_, "\r%s\x1b[K", last_.c_str());  // \x1b[K clears what a longer line left
  std::fflush(out_);
}

void Progress::message(const std::string& line) {
  if (!enabled_) return;
  if (bar_ && drawn_) {
    std::fprintf(out_, "\r\x1b[K%s\n%s", line.c_str(), last_.c_str());
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (bar_ && drawn_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  drawn_ = false;
}

}  // namespace dlrun::metrics
