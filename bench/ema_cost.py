"""What train.ema_decay costs per step: ResNet-18 on the CPU, with and without the moving average.

    python bench/ema_cost.py --dlrun build/dlrun [--steps 40] [--rounds 3]

Two measurements, side by side on one machine:
  1. The update alone: torch._foreach_lerp_ over ResNet-18's floating parameters and buffers
     (the one call dlrun makes per update, the same ATen kernel), median of 50 calls, against
     the median step time of the runs below.
  2. The whole step: `dlrun train` of a ResNet-18 (CIFAR stem, synthetic 3x32x32, batch 32,
     2 threads) for --steps steps with train.ema_decay=0 and 0.999, alternating, --rounds
     times; each run's median per-step time from metrics.jsonl (steps 6 on). Reports the ratio
     per round and its spread: an effect smaller than the spread is not a measurement.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CONFIG = """run: {name: ema-bench, device: cpu, seed: 1, threads: 2}
model: {name: resnet18, stem: cifar, in_channels: 3, num_classes: 10}
data: {name: synthetic, synthetic_shape: [3, 32, 32], synthetic_train_size: 4096, synthetic_eval_size: 64,
       batch_size: 32, workers: 1, augment: []}
optim: {name: sgd, lr: 0.01, momentum: 0.9}
train: {eval_every_epochs: 0, eval_at_end: false}
log: {every_steps: 1, progress: none}
checkpoint: {every_steps: 0, keep_last: 1}
"""


def step_times(run_dir):
    """Seconds per step from metrics.jsonl's samples_per_s (batch 32), steps 6 on."""
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "event" not in m and m.get("step", 0) > 5 and m.get("samples_per_s"):
                out.append(32 / m["samples_per_s"])
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlrun", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import torch
    import torchvision

    torch.set_num_threads(2)
    sd = torchvision.models.resnet18(num_classes=10).state_dict()
    avg = [v.clone() for v in sd.values() if v.is_floating_point()]
    cur = [v.clone() + 0.01 for v in sd.values() if v.is_floating_point()]
    calls = []
    for _ in range(50):
        start = time.perf_counter()
        torch._foreach_lerp_(avg, cur, 0.001)
        calls.append(time.perf_counter() - start)
    update_s = statistics.median(calls)
    n = sum(t.numel() for t in avg)

    work = tempfile.mkdtemp(prefix="dlrun-ema-bench-")
    try:
        cfg = os.path.join(work, "r18.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        rounds = []
        for r in range(a.rounds):
            times = {}
            for decay in ("0", "0.999"):
                run = os.path.join(work, f"run-{r}-{decay}")
                subprocess.run([a.dlrun, "train", cfg, "--run-dir", run, f"train.max_steps={a.steps}",
                                f"train.ema_decay={decay}"], check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                times[decay] = step_times(run)
            rounds.append(times)
            print(f"round {r + 1}: step {times['0'] * 1000:.1f} ms without, {times['0.999'] * 1000:.1f} ms with "
                  f"(x{times['0.999'] / times['0']:.3f})", flush=True)
        ratios = [t["0.999"] / t["0"] for t in rounds]
        step_s = statistics.median(t["0"] for t in rounds)
        print(f"ResNet-18: {n:,} floating values; one _foreach_lerp_ update {update_s * 1000:.2f} ms "
              f"(median of 50) = {100 * update_s / step_s:.2f}% of a {step_s * 1000:.0f} ms step")
        print(f"whole step with/without: median x{statistics.median(ratios):.3f}, rounds {min(ratios):.3f} to "
              f"{max(ratios):.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
