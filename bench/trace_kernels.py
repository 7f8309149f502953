#!/usr/bin/env python3
"""The CUDA kernels of a profiler trace, by total time: what a training step ran.

Reads a Chrome/Kineto trace (dlrun's `profile.steps` writes one under RUN_DIR/profile/,
torch.profiler's export_chrome_trace the same format), sums the duration of every event of
category "kernel" by name, and prints the top N with calls, total ms and share of all kernel
time, then which BatchNorm implementation ran: cuDNN's (kernel names with "bn_fw"/"bn_bw" or
"batchnorm"), ATen's native one ("batch_norm"), or dlrun's own ("dlrun" or the bn_cuda
namespace of src/kernels/bn_relu_device.cuh).

  bench/trace_kernels.py TRACE.json [--top 25] [--steps N] [--out FILE]

--steps divides the totals by the number of profiled steps (per-step figures).
"""
import argparse
import collections
import json
import sys


def kernel_totals(trace):
    """{name: [calls, total_us]} over the trace's kernel events."""
    totals = collections.defaultdict(lambda: [0, 0.0])
    for e in trace.get("traceEvents", []):
        if e.get("cat") == "kernel" and "dur" in e:
            t = totals[e.get("name", "?")]
            t[0] += 1
            t[1] += float(e["dur"])
    return totals


def batchnorm_backends(names):
    """The BatchNorm implementations whose kernels appear among `names` (a set of strings)."""
    found = set()
    for n in names:
        low = n.lower()
        # cuDNN's: bn_fw_*/bn_bw_* (spatial), batchnorm_*_nhwc_* (persistent NHWC); ATen spells
        # its kernels batch_norm_*.
        if "bn_fw" in low or "bn_bw" in low or "batchnorm" in low:
            found.add("cudnn")
        elif "batch_norm" in low:
            found.add("native")
        elif "bn_cuda" in low or "dlrun" in low:
            found.add("dlrun")
    return sorted(found)


def report(totals, top, steps):
    all_us = sum(t[1] for t in totals.values()) or 1.0
    rows = sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]
    lines = [f"{'ms':>9} {'calls':>6} {'share':>6}  kernel" + (f" (per step, {steps} steps)" if steps > 1 else "")]
    for name, (calls, us) in rows:
        lines.append(f"{us / 1000 / steps:9.3f} {calls / steps:6.0f} {100 * us / all_us:5.1f}%  {name[:160]}")
    lines.append(f"all kernels: {all_us / 1000 / steps:.3f} ms, {len(totals)} distinct")
    lines.append("batchnorm backend: " + (", ".join(batchnorm_backends(totals)) or "none seen"))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    with open(a.trace) as f:
        trace = json.load(f)
    text = report(kernel_totals(trace), a.top, max(1, a.steps))
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
