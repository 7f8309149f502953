#!/usr/bin/env python3
"""Activation checkpointing for each family of the zoo: the step's peak memory and time of its
smallest member under model.activation_checkpointing none, blocks and (where the family has
stages) stages, each mode in its own `dlrun bench memory` process, on the CPU or a GPU.

The peak is the most bytes tensors held during the second step over what they held before it
(the optimizer state then exists): byte counts, which repeat exactly; the times vary with the
machine's load. The table goes to stdout (and to --append's file).

    bench/zoo_memory.py --dlrun build/dlrun [--batch 16] [--image-size 128] [--device cpu]
                        [--append docs/benchmarks.md]
"""
import argparse
import datetime
import json
import shlex
import subprocess
import sys

# each family's smallest member
MEMBERS = ["resnet18", "mobilenet_v3_small", "efficientnet_b0", "regnet_x_400mf", "convnext_tiny", "vit_b_32", "swin_t"]


def checkpointing_modes(a):
    """Each name's activation-checkpointing modes, as `dlrun models --json` lists them
    ("activation_checkpointing:blocks,stages" among its features)."""
    listed = json.loads(subprocess.run([a.dlrun, "models", "--json"], check=True, capture_output=True,
                                       text=True).stdout)
    modes = {}
    for m in listed:
        for f in m["features"]:
            if f.startswith("activation_checkpointing:"):
                modes[m["name"]] = f.split(":", 1)[1].split(",")
    return modes


def measure(a, name, mode):
    """One `dlrun bench memory` process: it runs 2 + --repeat steps (the first, the measured one,
    the timed ones), over which it counts the recomputed segments."""
    cmd = [a.dlrun, "bench", "memory", "--model", name, "--batch", str(a.batch), "--image-size", str(a.image_size),
           "--checkpointing", mode, "--device", a.device, "--repeat", str(a.repeat), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", default="build/dlrun")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--models", default=",".join(MEMBERS))
    ap.add_argument("--append", default="")
    a = ap.parse_args()
    rows = []
    modes = checkpointing_modes(a)
    for name in a.models.split(","):
        base = None
        for mode in ["none", *modes.get(name, [])]:
            r = measure(a, name, mode)
            base = base or r
            rows.append(f"| {name} | {mode} | {r['peak_step_bytes'] / 2**20:.1f} MiB | "
                        f"{r['peak_step_bytes'] / base['peak_step_bytes']:.2f} | {r['segments_recomputed'] // (a.repeat + 2)} | "
                        f"{r['step_s_median']:.3f} s | {r['step_s_median'] / base['step_s_median']:.2f} |")
            print(rows[-1], flush=True)
    version = subprocess.run([a.dlrun, "--version"], capture_output=True, text=True).stdout.strip()
    report = "\n".join([
        f"### {datetime.date.today().isoformat()}: `bench/zoo_memory.py {' '.join(shlex.quote(x) for x in sys.argv[1:])}`",
        "", f"{version}; batch {a.batch} of 3x{a.image_size}x{a.image_size} synthetic images, SGD with momentum, "
        f"float32, device {a.device}; peak = the step's most bytes held by tensors over what they held before it.", "",
        "| model | checkpointing | step peak | vs none | segments recomputed per step | step time (median) | vs none |",
        "| --- | --- | --- | --- | --- | --- | --- |", *rows, ""])
    print(report)
    if a.append:
        with open(a.append, "a") as f:
            f.write("\n" + report)


if __name__ == "__main__":
    main()
