// The training loop (see trainer.h). Structure:
//   Session::setup()   device/threads/seed, run dir, data, model, optimizer, resume
//   Session::loop()    epochs -> micro-batches -> optimizer steps, with logging, eval,
//                      checkpoints and the preemption check at every step boundary
//   Session::finish()  final eval, final checkpoint, summary.json
#include "train/trainer.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "config/loader.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "metrics/writers.h"
#include "models/model.h"
#include "preempt/preempt.h"
#include "train/amp.h"
#include "train/evaluate.h"
#include "train/fingerprint.h"
#include "train/optim.h"
#include "train/run_state.h"
#include "train/schedule.h"

namespace fs = std::filesystem;

namespace dlrun::train {

std::string resolve_run_dir(const Config& cfg, const std::string& cli_run_dir) {
  if (!cli_run_dir.empty()) return cli_run_dir;
  if (!cfg.run.dir.empty()) return cfg.run.dir;
  return "runs/" + cfg.run.name;
}

namespace {

torch::Device resolve_device(const std::string& d) {
  if (d == "cpu") return torch::kCPU;
  if (d == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  DLRUN_CHECK_INPUT(torch::cuda::is_available(), "run.device={} but CUDA is not available here (see `dlrun info`)", d);
  torch::Device dev(d);
  DLRUN_CHECK_INPUT(!dev.has_index() || dev.index() < static_cast<int>(torch::cuda::device_count()),
                    "run.device={} but only {} CUDA device(s) are visible", d, torch::cuda::device_count());
  return dev.has_index() ? dev : torch::Device(torch::kCUDA, 0);
}

// Test hooks (docs/testing.md): DLRUN_FAULT=abort_at_step:K aborts the process right after
// step K, as kill -9 would; DLRUN_FAULT=signal_at_step:K sends SIGTERM to itself after step K.
struct StepFault {
  int64_t abort_at = -1, signal_at = -1;
  static StepFault from_env() {
    StepFault f;
    const char* v = std::getenv("DLRUN_FAULT");
    if (!v) return f;
    std::string s(v);
    auto num = [&](const std::string& prefix) -> int64_t {
      return s.rfind(prefix, 0) == 0 ? std::atoll(s.c_str() + prefix.size()) : -1;
    };
    f.abort_at = num("abort_at_step:");
    f.signal_at = num("signal_at_step:");
    return f;
  }
  void after_step(int64_t step) const {
    if (step == abort_at) {
      std::fprintf(stderr, "dlrun: DLRUN_FAULT: aborting after step %lld\n", static_cast<long long>(step));
      std::abort();
    }
    if (step == signal_at) std::raise(SIGTERM);
  }
};

class Session {
 public:
  explicit Session(const TrainArgs& a) : args_(a), cfg_(a.cfg) {}
  int run();
  /// After an exception: best-effort summary.json with status "failed" (never throws).
  void record_failure(const std::string& what) noexcept;

 private:
  void setup();
  void resume_or_start();
  void train_step(const std::vector<data::Batch>& micro);
  void log_step(double loss);
  bool eval_due(bool epoch_end) const;
  void run_eval();
  void save(bool sync, const char* why);
  int interrupted();
  void write_summary(const std::string& status);

  TrainArgs args_;
  Config cfg_;
  std::string run_dir_, ckpt_dir_;
  torch::Device device_ = torch::kCPU;
  std::shared_ptr<models::Model> model_;
  std::unique_ptr<torch::optim::Optimizer> optim_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<data::Loader> train_loader_, eval_loader_;
  std::unique_ptr<ckpt::Writer> writer_;
  std::unique_ptr<metrics::JsonlWriter> jsonl_;
  std::unique_ptr<metrics::TensorBoardWriter> tb_;
  std::unique_ptr<metrics::Progress> progress_;
  std::unique_ptr<GradScaler> scaler_;
  std::unique_ptr<preempt::NoticeWatcher> watcher_;
  ScheduleSpec sched_;
  RunState st_;
  bool amp_ = false;
  torch::ScalarType amp_dtype_ = torch::kHalf;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  double start_wall_ = 0, start_mono_ = 0, last_ckpt_mono_ = 0, last_log_mono_ = 0;
  int64_t samples_since_log_ = 0, samples_this_process_ = 0, steps_this_process_ = 0;
  double last_loss_ = 0, loss_accum_ = 0;
  int64_t loss_count_ = 0;
  std::string last_ckpt_;
  nlohmann::json last_eval_;
  StepFault fault_ = StepFault::from_env();
};

void Session::setup() {
  const auto& c = cfg_;
  device_ = resolve_device(c.run.device);
  if (c.run.threads > 0) at::set_num_threads(static_cast<int>(c.run.threads));
  if (c.run.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  torch::manual_seed(c.run.seed);

  run_dir_ = args_.run_dir;
  fs::create_directories(run_dir_);
  ckpt_dir_ = c.checkpoint.dir.empty() ? (fs::path(run_dir_) / "checkpoints").string() : c.checkpoint.dir;

  // Data first: a bad data file must stop us before anything is allocated on the device.
  auto train_ds = data::open(c.data, data::Split::kTrain, c.run.seed);
  auto eval_ds = data::open(c.data, data::Split::kEval, c.run.seed);
  auto info = train_ds->info();
  DLRUN_CHECK_INPUT(info.channels == c.model.in_channels,
                    "data.name={} has {} channel(s) but model.in_channels is {} ({})", c.data.name, info.channels,
                    c.model.in_channels, c.where("model.in_channels").str());
  DLRUN_CHECK_INPUT(info.num_classes <= c.model.num_classes,
                    "data.name={} has {} classes but model.num_classes is {} ({})", c.data.name, info.num_classes,
                    c.model.num_classes, c.where("model.num_classes").str());

  data::LoaderSpec spec;
  spec.seed = c.run.seed;
  spec.grad_accum = c.train.grad_accum;
  spec.device = device_;
  train_loader_ = std::make_unique<data::Loader>(train_ds, c.data, spec);
  spec.train = false;
  eval_loader_ = std::make_unique<data::Loader>(eval_ds, c.data, spec);
  steps_per_epoch_ = train_loader_->steps_per_epoch();
  DLRUN_CHECK_INPUT(steps_per_epoch_ > 0, "the training set ({} samples) is smaller than one global batch ({})",
                    train_ds->size(), c.data.batch_size);
  total_steps_ = c.train.max_steps > 0 ? c.train.max_steps : c.train.epochs * steps_per_epoch_;

  const int64_t hw = info.height > 0 ? info.height : (c.data.image_size > 0 ? c.data.image_size : 224);
  model_ = models::build(c.model, c.run.seed, hw);
  model_->to(device_);
  model_->train();
  for (auto& p : model_->parameters())
    if (p.requires_grad()) params_.push_back(p);
  optim_ = build_optimizer(c.optim, *model_);
  sched_ = ScheduleSpec{c.sched, c.optim.lr, total_steps_, steps_per_epoch_};

  amp_ = c.amp.enabled && device_.is_cuda();
  if (c.amp.enabled && !device_.is_cuda()) log0::warn("amp.enabled ignored: the device is {}", device_.str());
  amp_dtype_ = c.amp.dtype == "bf16" ? torch::kBFloat16 : torch::kHalf;
  scaler_ = std::make_unique<GradScaler>(c.amp, amp_ && amp_dtype_ == torch::kHalf);

  log0::info("model {}: {} parameters; data {}: {} train / {} eval samples; {} steps/epoch, {} steps on {}",
             c.model.name, models::num_parameters(*model_), c.data.name, train_ds->size(), eval_ds->size(),
             steps_per_epoch_, total_steps_, device_.str());

  writer_ = std::make_unique<ckpt::Writer>(ckpt_dir_, c.checkpoint);
  jsonl_ = std::make_unique<metrics::JsonlWriter>((fs::path(run_dir_) / "metrics.jsonl").string());
  if (c.log.tensorboard) tb_ = std::make_unique<metrics::TensorBoardWriter>(run_dir_);
  if (c.preemption.watch != "none") {
    watcher_ = std::make_unique<preempt::NoticeWatcher>(c.preemption);
    log0::info("watching for preemption notices: {} ({})", c.preemption.watch, watcher_->endpoint());
  }
}

void Session::resume_or_start() {
  st_ = RunState{};
  std::string from;
  if (args_.resume == "never") {
    if (fs::exists(ckpt_dir_) && !ckpt::list(ckpt_dir_).empty()) {
      DLRUN_CHECK_INPUT(args_.force, "{} already has checkpoints; use --resume auto to continue that run, a new "
                                     "--run-dir, or --force to set them aside and start fresh", ckpt_dir_);
      std::string aside = ckpt_dir_ + ".old-" + std::to_string(static_cast<int64_t>(metrics::wall_now()));
      fs::rename(ckpt_dir_, aside);
      log0::warn("--force: moved the existing checkpoints to {}", aside);
    }
  } else if (args_.resume == "auto") {
    auto latest = fs::exists(ckpt_dir_)
                      ? ckpt::latest_verified(ckpt_dir_, [](const std::string& p, const std::string& why) {
                          log0::warn("skipping checkpoint {}: {}", p, why);
                        })
                      : std::nullopt;
    if (latest) from = *latest;
  } else {
    from = args_.resume;
  }
  if (!from.empty()) {
    auto snap = ckpt::load(from);
    restore(snap, cfg_, *model_, *optim_, *scaler_, st_, total_steps_);
    log0::info("resumed from {} at step {} (epoch {}, sample {})", from, st_.step, st_.epoch, st_.cursor);
    last_ckpt_ = from;
  }
  // Write the resolved config (with versions) for this run.
  std::ofstream((fs::path(run_dir_) / "config.yaml").string())
      << "# resolved by " << version_line() << "\n" << config::to_yaml(cfg_, false);
  if (!args_.save_init.empty() && from.empty()) save_weights(*model_, args_.save_init);
}

void Session::train_step(const std::vector<data::Batch>& micro) {
  const double lr = lr_at(sched_, st_.step);
  set_lr(*optim_, lr);
  optim_->zero_grad(true);
  // Summed on the device in float64 (as the per-micro-batch values would be on the host), so
  // the step reads it back once: one device sync per step, not one per micro-batch.
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  for (const auto& b : micro) {
    torch::Tensor loss;
    {
      AutocastScope ac(amp_, amp_dtype_);
      auto logits = model_->forward(b.x);
      loss = torch::nn::functional::cross_entropy(
          logits.to(torch::kFloat32), b.y,
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(cfg_.train.label_smoothing));
    }
    loss_sum += loss.detach().to(torch::kFloat64);
    scaler_->scale(loss / static_cast<double>(micro.size())).backward();
  }
  bool finite = scaler_->unscale(params_);
  if (finite && cfg_.train.clip_grad_norm > 0) torch::nn::utils::clip_grad_norm_(params_, cfg_.train.clip_grad_norm);
  if (finite) optim_->step();
  else log::warn("step {}: non-finite gradients, step skipped (loss scale {} -> {})", st_.step, scaler_->scale_value(),
                 scaler_->scale_value() / 2);
  scaler_->update(finite);
  last_loss_ = loss_sum.item<double>() / static_cast<double>(micro.size());
  loss_accum_ += last_loss_;
  ++loss_count_;
  st_.step += 1;
  st_.cursor += cfg_.data.batch_size;
  ++steps_this_process_;
  samples_since_log_ += cfg_.data.batch_size;
  samples_this_process_ += cfg_.data.batch_size;
  log_step(lr);
}

void Session::log_step(double lr) {
  const bool due = st_.step % cfg_.log.every_steps == 0 || st_.step == total_steps_;
  const double now = metrics::mono_now();
  const double ips = samples_since_log_ / std::max(1e-9, now - last_log_mono_);
  progress_->update(st_.step, st_.epoch, last_loss_, ips, lr);
  if (!due) return;
  const double avg = loss_accum_ / std::max<int64_t>(1, loss_count_);
  jsonl_->write({{"step", st_.step}, {"epoch", st_.epoch}, {"loss", last_loss_}, {"loss_avg", avg}, {"lr", lr},
                 {"samples_per_s", ips}, {"time", metrics::wall_now()}});
  if (tb_) {
    tb_->add_scalar("train/loss", last_loss_, st_.step);
    tb_->add_scalar("train/lr", lr, st_.step);
    tb_->add_scalar("train/samples_per_s", ips, st_.step);
    tb_->flush();
  }
  samples_since_log_ = 0;
  loss_accum_ = 0;
  loss_count_ = 0;
  last_log_mono_ = now;
}

bool Session::eval_due(bool epoch_end) const {
  const auto& t = cfg_.train;
  return (t.eval_every_steps > 0 && st_.step % t.eval_every_steps == 0) ||
         (epoch_end && t.eval_every_epochs > 0 && st_.epoch % t.eval_every_epochs == 0);
}

void Session::run_eval() {
  auto r = evaluate(*model_, *eval_loader_);
  last_eval_ = {{"accuracy", r.accuracy}, {"top5", r.top5}, {"loss", r.loss}, {"samples", r.samples}, {"step", st_.step}};
  progress_->message(fmt::format("eval at step {} (epoch {}): accuracy {:.4f}, top-5 {:.4f}, loss {:.4f}", st_.step,
                                 st_.epoch, r.accuracy, r.top5, r.loss));
  jsonl_->write({{"event", "eval"}, {"step", st_.step}, {"epoch", st_.epoch}, {"accuracy", r.accuracy},
                 {"top5", r.top5}, {"loss", r.loss}, {"time", metrics::wall_now()}});
  if (tb_) {
    tb_->add_scalar("eval/accuracy", r.accuracy, st_.step);
    tb_->add_scalar("eval/top5", r.top5, st_.step);
    tb_->add_scalar("eval/loss", r.loss, st_.step);
    tb_->flush();
  }
}

void Session::save(bool sync, const char* why) {
  const double t0 = metrics::mono_now();
  auto snap = make_snapshot(cfg_, *model_, *optim_, *scaler_, st_, total_steps_, device_);
  const double copied = metrics::mono_now();
  writer_->save(std::move(snap));
  if (sync) writer_->wait();
  const double stall = metrics::mono_now() - t0;
  last_ckpt_mono_ = metrics::mono_now();
  last_ckpt_ = (fs::path(ckpt_dir_) / ckpt::dir_name(st_.step)).string();
  jsonl_->write({{"event", "checkpoint"}, {"step", st_.step}, {"reason", why}, {"path", last_ckpt_},
                 {"copy_s", copied - t0}, {"stall_s", stall}, {"async", !sync}, {"time", metrics::wall_now()}});
}

int Session::interrupted() {
  std::string reason = preempt::stop_reason();
  double signal_time = preempt::stop_time();
  if (reason.empty()) reason = "stop requested by another rank";
  if (signal_time <= 0) signal_time = metrics::wall_now();
  progress_->message(fmt::format("{} received: saving a checkpoint at step {} and exiting with code 75", reason, st_.step));
  save(true, "preemption");
  const double commit_time = metrics::wall_now();
  nlohmann::json ev = {{"event", "preempt"},       {"reason", reason},           {"signal_time", signal_time},
                       {"commit_time", commit_time}, {"latency_s", commit_time - signal_time},
                       {"step", st_.step},          {"steps_lost", 0}};
  jsonl_->write(ev);
  st_.preemption = ev;
  write_summary("interrupted");
  log0::info("checkpoint committed {:.2f} s after {}: {}", commit_time - signal_time, reason, last_ckpt_);
  return static_cast<int>(ExitCode::kInterrupted);
}

void Session::write_summary(const std::string& status) {
  const double wall = metrics::mono_now() - start_mono_;
  const double useful = static_cast<double>(st_.step);
  const double computed = useful + static_cast<double>(st_.steps_lost_total);
  nlohmann::json j = {
      {"status", status},
      {"steps", st_.step},
      {"epochs", static_cast<double>(st_.step) / static_cast<double>(steps_per_epoch_)},
      {"final_train_loss", last_loss_},
      {"eval", last_eval_.is_null() ? nlohmann::json(nullptr) : last_eval_},
      {"wall_time_s", wall},
      {"samples_per_s", samples_this_process_ / std::max(1e-9, wall)},
      {"checkpoint", last_ckpt_.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_ckpt_)},
      {"params_sha256", params_sha256(*model_)},
      {"steps_lost", st_.steps_lost_total},
      {"goodput", computed > 0 ? useful / computed : 1.0},
      {"preemption", st_.preemption},
      {"resumed_from_step", st_.resumed_from_step},
      {"device", device_.str()},
      {"version", version_line()},
  };
  metrics::write_json_atomic((fs::path(run_dir_) / "summary.json").string(), j);
}

int Session::run() {
  setup();
  resume_or_start();
  preempt::install_signal_handlers();
  start_wall_ = metrics::wall_now();
  start_mono_ = last_ckpt_mono_ = last_log_mono_ = metrics::mono_now();
  note_resume(st_, (fs::path(run_dir_) / "metrics.jsonl").string());
  jsonl_->write({{"event", "start"}, {"step", st_.step}, {"epoch", st_.epoch}, {"total_steps", total_steps_},
                 {"resumed_from", last_ckpt_}, {"steps_lost", st_.steps_lost_last}, {"time", start_wall_}});
  progress_ = std::make_unique<metrics::Progress>(cfg_.log.progress, total_steps_, cfg_.log.every_steps);
  const auto& ck = cfg_.checkpoint;

  while (st_.step < total_steps_) {
    train_loader_->start_epoch(st_.epoch, st_.cursor);
    std::vector<data::Batch> micro;
    bool epoch_done = true;
    while (auto b = train_loader_->next()) {
      micro.push_back(std::move(*b));
      if (static_cast<int64_t>(micro.size()) < cfg_.train.grad_accum) continue;
      train_step(micro);
      micro.clear();
      fault_.after_step(st_.step);
      // Step boundary: everything below sees a consistent state.
      bool stop = preempt::stop_requested();
      if (args_.agree_stop) stop = args_.agree_stop(stop);
      if (stop) return interrupted();
      if (eval_due(false)) run_eval();
      const bool by_steps = ck.every_steps > 0 && st_.step % ck.every_steps == 0;
      const bool by_time = ck.every_minutes > 0 && metrics::mono_now() - last_ckpt_mono_ >= ck.every_minutes * 60.0;
      if ((by_steps || by_time) && st_.step < total_steps_) save(!ck.async, by_steps ? "every_steps" : "every_minutes");
      if (st_.step >= total_steps_) {
        epoch_done = st_.cursor >= steps_per_epoch_ * cfg_.data.batch_size;
        break;
      }
    }
    if (epoch_done) {
      st_.epoch += 1;
      st_.cursor = 0;
      if (eval_due(true)) run_eval();
      if (ck.at_epoch_end && st_.step < total_steps_) save(!ck.async, "epoch_end");
    } else {
      break;
    }
  }
  if (cfg_.train.eval_at_end && (last_eval_.is_null() || last_eval_.value("step", -1) != st_.step)) run_eval();
  if (ck.at_end) save(true, "end");
  writer_->wait();
  progress_->finish();
  write_summary("completed");
  jsonl_->write({{"event", "end"}, {"status", "completed"}, {"step", st_.step}, {"time", metrics::wall_now()}});
  log0::info("done: {} steps, eval accuracy {}, summary in {}/summary.json", st_.step,
             last_eval_.is_null() ? std::string("n/a") : fmt::format("{:.4f}", last_eval_["accuracy"].get<double>()),
             run_dir_);
  return 0;
}

void Session::record_failure(const std::string& what) noexcept {
  try {
    if (!model_ || !jsonl_) return;  // failed during setup: nothing was trained
    jsonl_->write({{"event", "end"}, {"status", "failed"}, {"error", what}, {"step", st_.step},
                   {"time", metrics::wall_now()}});
    write_summary("failed");
  } catch (...) {
  }
}

}  // namespace

int run(const TrainArgs& args) {
  Session s(args);
  try {
    return s.run();
  } catch (const Error& e) {
    s.record_failure(e.render());
    throw;
  } catch (const std::exception& e) {
    s.record_failure(e.what());
    throw;
  }
}

}  // namespace dlrun::train
