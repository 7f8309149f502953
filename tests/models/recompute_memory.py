#!/usr/bin/env python3
"""Activation checkpointing saves memory: `dlrun bench memory` measures the peak bytes held by
tensors during a ResNet-50 training step (forward, backward, SGD update; after a warm-up step),
each mode in its own process, and blocks must hold at most 75% of the plain step's peak,
stages at most 90% (measured on the CPU: 389 / 241 / 302 MiB at batch 16, 112x112). A
recomputation that silently kept every activation would fail here.

    recompute_memory.py path/to/dlrun
"""
import json
import subprocess
import sys


def measure(dlrun, mode):
    out = subprocess.run([dlrun, "bench", "memory", "--model", "resnet50", "--batch", "16", "--image-size", "112",
                          "--checkpointing", mode, "--device", "cpu", "--repeat", "0", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    dlrun = sys.argv[1]
    r = {m: measure(dlrun, m) for m in ("none", "blocks", "stages")}
    for m, j in r.items():
        print(f"{m:7s} peak {j['peak_step_bytes'] / 2**20:8.1f} MiB  step {j['step_s_median']:.3f} s  "
              f"segments recomputed {j['segments_recomputed']}")
    none, blocks, stages = (r[m]["peak_step_bytes"] for m in ("none", "blocks", "stages"))
    assert r["none"]["segments_recomputed"] == 0, r["none"]
    # 16 bottleneck blocks, 4 stages, recomputed in each of the two steps
    assert r["blocks"]["segments_recomputed"] == 2 * 16, r["blocks"]
    assert r["stages"]["segments_recomputed"] == 2 * 4, r["stages"]
    assert blocks <= 0.75 * none, f"blocks {blocks} vs none {none}: ratio {blocks / none:.2f} > 0.75"
    assert stages <= 0.90 * none, f"stages {stages} vs none {none}: ratio {stages / none:.2f} > 0.90"
    assert blocks < stages, "blocks should hold less than stages"
    print(f"ok: blocks {blocks / none:.2f}x, stages {stages / none:.2f}x the plain step's peak")


if __name__ == "__main__":
    main()
