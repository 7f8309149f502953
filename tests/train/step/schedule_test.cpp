// LR schedules against golden values produced by PyTorch 2.11 schedulers (OneCycleLR cos,
// CosineAnnealingLR, StepLR, MultiStepLR; 20 steps, lr 0.1, one step per epoch), and warmup.
#include <catch2/catch.hpp>

#include <vector>

#include "train/step/schedule.h"

using dlrun::SchedOptions;
using dlrun::train::lr_at;
using dlrun::train::ScheduleSpec;

namespace {
ScheduleSpec spec(dlrun::SchedName name) {
  ScheduleSpec s;
  s.opts.name = name;
  s.base_lr = 0.1;
  s.total_steps = 20;
  s.steps_per_epoch = 1;
  return s;
}
void check(const ScheduleSpec& s, const std::vector<double>& golden) {
  for (size_t i = 0; i < golden.size(); ++i) {
    INFO("step " << i);
    CHECK(lr_at(s, static_cast<int64_t>(i)) == Approx(golden[i]).epsilon(1e-12).margin(1e-15));
  }
}
}  // namespace

TEST_CASE("onecycle matches torch.optim.lr_scheduler.OneCycleLR", "[train][sched]") {
  check(spec(dlrun::SchedName::kOnecycle),
        {0.0040000000000000036, 0.013167184270002533, 0.037167184270002526, 0.06683281572999747, 0.09083281572999748,
         0.1, 0.09874640062350874, 0.09504846320134738, 0.089091617757105, 0.0811745653949763, 0.07169430017913009,
         0.06112620219362893, 0.0500002, 0.03887419780637107, 0.028306099820869922, 0.0188258346050237,
         0.010908782242895003, 0.004951936798652629, 0.0012539993764912555, 4e-07});
}

TEST_CASE("cosine matches CosineAnnealingLR", "[train][sched]") {
  auto s = spec(dlrun::SchedName::kCosine);
  s.opts.min_lr = 0.001;
  check(s, {0.1, 0.09939057285945932, 0.09757729755661011, 0.09460482294732421, 0.09054634122155991,
            0.0855017856687341, 0.07959536998847742, 0.07297252973710756, 0.0657963412215599, 0.05824350601949144,
            0.0505, 0.04275649398050859, 0.03520365877844011, 0.02802747026289244, 0.02140463001152259,
            0.015498214331265903, 0.010453658778440109, 0.006395177052675795, 0.0034227024433899004,
            0.001609427140540686});
}

TEST_CASE("step and multistep match StepLR and MultiStepLR", "[train][sched]") {
  auto s = spec(dlrun::SchedName::kStep);
  s.opts.step_size = 6;
  s.opts.gamma = 0.5;
  check(s, {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025, 0.025,
            0.025, 0.0125, 0.0125});
  auto m = spec(dlrun::SchedName::kMultistep);
  m.opts.milestones = {5, 12};
  m.opts.gamma = 0.1;
  for (int i = 0; i < 20; ++i) CHECK(lr_at(m, i) == Approx(i < 5 ? 0.1 : i < 12 ? 0.01 : 0.001));
}

TEST_CASE("linear warmup ramps to the schedule", "[train][sched]") {
  auto s = spec(dlrun::SchedName::kConstant);
  s.opts.warmup_steps = 4;
  CHECK(lr_at(s, 0) == Approx(0.025));
  CHECK(lr_at(s, 1) == Approx(0.05));
  CHECK(lr_at(s, 3) == Approx(0.1));
  CHECK(lr_at(s, 10) == Approx(0.1));
  s.opts.warmup_steps = 0;
  s.opts.warmup_epochs = 0.5;
  s.steps_per_epoch = 8;  // 0.5 epoch = 4 steps
  CHECK(lr_at(s, 0) == Approx(0.025));
  CHECK(lr_at(s, 4) == Approx(0.1));
}

TEST_CASE("warmup then cosine matches SequentialLR(LinearLR, CosineAnnealingLR)", "[train][sched]") {
  // PyTorch 2.11: SequentialLR([LinearLR(start_factor=1/4, total_iters=3),
  //                             CosineAnnealingLR(T_max=16, eta_min=0.001)], milestones=[4]), lr 0.1.
  auto s = spec(dlrun::SchedName::kCosine);
  s.opts.warmup_steps = 4;
  s.opts.min_lr = 0.001;
  check(s, {0.025, 0.05, 0.07500000000000001, 0.1, 0.1, 0.09904887137995991, 0.0962320368593087,
            0.09165774580897601, 0.0855017856687341, 0.07800072653447031, 0.06944282990207194,
            0.060156970939798354, 0.050499999999999996, 0.04084302906020165, 0.03155717009792806,
            0.022999273465529702, 0.0154982143312659, 0.009342254191024003, 0.004767963140691305,
            0.0019511286200400934});
}

TEST_CASE("warmup matches LinearLR(start_factor=1/W, total_iters=W-1)", "[train][sched]") {
  auto s = spec(dlrun::SchedName::kConstant);
  s.opts.warmup_steps = 4;
  check(s, {0.025, 0.05, 0.07500000000000001, 0.1, 0.1, 0.1, 0.1, 0.1});
}

TEST_CASE("onecycle has its own rise: warmup settings do not apply to it", "[train][sched]") {
  auto plain = spec(dlrun::SchedName::kOnecycle);
  auto warmed = plain;
  warmed.opts.warmup_steps = 5;
  warmed.opts.warmup_epochs = 2;
  for (int64_t i = 0; i < 20; ++i) CHECK(lr_at(warmed, i) == lr_at(plain, i));
}

TEST_CASE("SWA: from its start epoch the rate is SWALR's (cos) stepped once per epoch", "[train][sched]") {
  // CosineAnnealingLR(T_max=20) stepped per step, two steps an epoch; at epoch 4
  // SWALR(swa_lr=0.02, anneal_epochs=A, anneal_strategy="cos") takes over, stepped per epoch.
  auto s = spec(dlrun::SchedName::kCosine);
  s.steps_per_epoch = 2;
  s.swa_start_epoch = 4;
  s.swa_lr = 0.02;
  s.swa_anneal_epochs = 3;
  check(s, {0.1, 0.0993844170297569, 0.09755282581475769, 0.0945503262094184, 0.0904508497187474,
            0.08535533905932739, 0.07938926261462367, 0.07269952498697735, 0.06545084971874739, 0.06545084971874739,
            0.05408813728906054, 0.05408813728906054, 0.03136271242968685, 0.03136271242968685, 0.02, 0.02, 0.02,
            0.02, 0.02, 0.02});
  s.swa_anneal_epochs = 0;  // swa_lr at once
  check(s, {0.1, 0.0993844170297569, 0.09755282581475769, 0.0945503262094184, 0.0904508497187474,
            0.08535533905932739, 0.07938926261462367, 0.07269952498697735, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02,
            0.02, 0.02, 0.02, 0.02, 0.02});
}
