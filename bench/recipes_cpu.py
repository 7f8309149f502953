#!/usr/bin/env python3
"""What an epoch of each ImageNet recipe (configs/imagenet/*.yaml) costs on this machine's CPU: the
model's training step (forward, backward, optimizer) at the recipe's training crop, timed by
`dlrun bench memory` in one process per recipe, one after another in this run; an epoch's hours
extrapolated to ImageNet's 1,281,167 training images. The step runs in float32 (a CPU recipe
sets amp.enabled=false); the data pipeline is not in it (docs/benchmarks.md measures the recipe
augmentation at hundreds of images/s per loader thread, far ahead of these steps).

    bench/recipes_cpu.py --dlrun build/dlrun [--batch 8] [--repeat 2] [--append docs/benchmarks.md]
"""
import argparse
import datetime
import glob
import json
import os
import platform
import shlex
import subprocess
import sys

import yaml

IMAGENET_TRAIN = 1281167


def recipe(path):
    """(model name, training side) of a recipe file (its ${env:...} roots left as they are)."""
    with open(path) as f:
        c = yaml.safe_load(f)
    return c["model"]["name"], int(c["data"]["image_size"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dlrun", required=True)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--configs", default=os.path.join(os.path.dirname(__file__), "..", "configs", "imagenet"))
    p.add_argument("--append", help="append the table to this markdown file")
    a = p.parse_args()
    rows = []
    for path in sorted(glob.glob(os.path.join(a.configs, "*.yaml"))):
        name, side = recipe(path)
        cmd = [a.dlrun, "bench", "memory", "--model", name, "--batch", str(a.batch), "--image-size", str(side),
               "--device", "cpu", "--repeat", str(a.repeat), "--json"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        per_image = r["step_s_median"] / a.batch
        rows.append((os.path.basename(path), name, side, r["step_s_median"], 1 / per_image,
                     IMAGENET_TRAIN * per_image / 3600))
        print(f"{rows[-1][0]}: {name} at {side}px: {r['step_s_median']:.2f} s a step of {a.batch}, "
              f"{rows[-1][4]:.1f} images/s, {rows[-1][5]:.0f} h an ImageNet epoch", flush=True)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [f"Command: `{' '.join(shlex.quote(x) for x in sys.argv)}`; {datetime.date.today().isoformat()}; "
             f"{cpu}, {os.cpu_count()} CPUs; float32, batch {a.batch}, median of {a.repeat} steps after the first.",
             "", "| recipe | model | training side | s / step | images/s | hours / ImageNet epoch |", "|---|---|---|---|---|---|"]
    lines += [f"| `{f}` | {m} | {s} | {t:.2f} | {ips:.1f} | {h:,.0f} |" for f, m, s, t, ips, h in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.append:
        with open(a.append, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
