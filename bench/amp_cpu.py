#!/usr/bin/env python3
"""bf16 autocast vs fp32 on the CPU, side by side (docs/benchmarks.md, "Mixed precision on the
CPU"): the quickstart convnet and resnet18 (ImageNet stem) on Fashion-MNIST (28x28), alternating fp32 and
bf16 runs for --repeat rounds; mean samples/s of the train records after a warm-up, medians.

  bench/amp_cpu.py --dlrun build/dlrun [--steps 100] [--repeat 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from runlog import mean_samples_per_s  # noqa: E402  (bench/, next to this script)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sps(run_dir, warmup):
    return mean_samples_per_s(run_dir, warmup)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlrun", default=os.path.join(ROOT, "build", "dlrun"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    cfg = os.path.join(ROOT, "configs", "quickstart.yaml")
    common = [f"train.max_steps={a.steps}", "log.every_steps=10", "log.progress=none", "train.eval_at_end=false",
              "train.eval_every_epochs=0", "checkpoint.at_end=false", "checkpoint.every_minutes=0",
              "checkpoint.every_steps=0", "run.device=cpu",
              "model.width=32", "model.channels_last=false", "data.workers=2"]  # the convnet of the recorded figures
    models = {"convnet": [], "resnet18": ["model.name=resnet18"]}
    precisions = {"fp32": ["amp.enabled=false"], "bf16": ["amp.enabled=true", "amp.dtype=bf16"]}
    res = {f"{m}/{p}": [] for m in models for p in precisions}
    for _ in range(a.repeat):
        for m, mo in models.items():
            for p, po in precisions.items():
                with tempfile.TemporaryDirectory() as t:
                    subprocess.run([a.dlrun, "train", cfg, *common, *mo, *po, "--run-dir", t + "/r"], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    res[f"{m}/{p}"].append(sps(t + "/r", a.steps // 4))
    med = {k: statistics.median(v) for k, v in res.items()}
    ratios = {m: med[f"{m}/bf16"] / med[f"{m}/fp32"] for m in models}
    print(json.dumps({"samples_per_s": med, "runs": res, "bf16_over_fp32": ratios, "steps": a.steps,
                      "repeat": a.repeat}, indent=1))


if __name__ == "__main__":
    main()
