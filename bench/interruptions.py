#!/usr/bin/env python3
"""What interruptions cost a run, measured: the same run once uninterrupted and once interrupted
N times at random moments by a mix of SIGTERM, SIGUSR1 (dlrun saves and exits 75) and SIGKILL
(a hard kill: the steps after the last checkpoint are computed again), each interruption
followed at once by a restart with --resume auto. Reports, from each run's summary.json, the
wall-clock account (`wall_clock`: paid time, start-ups, replayed steps, stops, goodput) and the
cost at --price per hour, against the uninterrupted run, and whether both end at the same
params_sha256. docs/checkpoints.md, "What a preemption cost", has the figures.

  bench/interruptions.py --dlrun build/dlrun [--interruptions 5] [--seed 1] [--price 2.5] [--out report.md]
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
CONFIG = os.path.join(SRC, "tests", "e2e", "data", "tiny.yaml")
# A deterministic CPU run of some seconds: the MLP keeps the steps cheap, 1,200 of them.
RUN = ("model.name=mlp", "model.hidden=[256,256]", "model.dropout=0", "run.threads=1", "train.max_steps=1200",
       "train.epochs=100", "log.every_steps=10", "log.progress=none", "checkpoint.every_steps=100",
       "train.eval_at_end=false")
KINDS = {"SIGTERM": signal.SIGTERM, "SIGUSR1": signal.SIGUSR1, "SIGKILL": signal.SIGKILL}


def start(dlrun, run_dir, overrides, env):
    return subprocess.Popen([dlrun, "train", CONFIG, *RUN, *overrides, "--run-dir", run_dir], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_to_end(dlrun, run_dir, overrides, env, what):
    """Train `run_dir` to its last step (exit 0, else the bench ends saying `what` failed)."""
    p = start(dlrun, run_dir, overrides, env)
    out, _ = p.communicate()
    if p.returncode != 0:
        sys.exit(f"{what} failed ({p.returncode}):\n{out[-3000:]}")


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def trained_step(run_dir):
    """The furthest step in metrics.jsonl (0 before the first line)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    best = 0
    with open(path) as f:
        for line in f:
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if "loss" in m and "event" not in m:
                best = max(best, m["step"])
    return best


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", required=True)
    ap.add_argument("--interruptions", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--price", type=float, default=2.5, help="price per hour of the machine (default 2.5)")
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--out", help="append the report (markdown) to this file")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    env = dict(os.environ, DLRUN_PRICE_PER_HOUR=str(a.price))
    env.pop("DLRUN_FAULT", None)
    steps = (f"train.max_steps={a.steps}",)
    tmp = tempfile.mkdtemp(prefix="dlrun-interruptions-")
    try:
        ref, run = os.path.join(tmp, "ref"), os.path.join(tmp, "run")
        t0 = time.time()
        run_to_end(a.dlrun, ref, steps, env, "the uninterrupted run")
        ref_wall = time.time() - t0
        base = summary(ref)

        # Each interruption lands at a random step of what is left; the kinds are mixed, each at
        # least once when there are three or more.
        kinds = [k for _, k in zip(range(a.interruptions), ["SIGTERM", "SIGUSR1", "SIGKILL"] * a.interruptions)]
        rng.shuffle(kinds)
        log = []
        t0 = time.time()
        for kind in kinds:
            done = trained_step(run)
            target = done + rng.randint(1, max(1, (a.steps - done) // (len(kinds) + 1)))
            p = start(a.dlrun, run, steps, env)
            while p.poll() is None and trained_step(run) < target:
                time.sleep(0.02)
            if p.poll() is not None:
                sys.exit(f"the run ended before interruption {len(log) + 1}:\n{p.communicate()[0][-3000:]}")
            p.send_signal(KINDS[kind])
            out, _ = p.communicate()
            want = -signal.SIGKILL if kind == "SIGKILL" else 75
            if p.returncode != want:
                sys.exit(f"{kind} at step ~{target}: exit {p.returncode}, expected {want}:\n{out[-3000:]}")
            log.append((kind, trained_step(run)))
        run_to_end(a.dlrun, run, steps, env, "the last restart")
        wall = time.time() - t0
        s = summary(run)
        w, c, bw = s["wall_clock"], s["cost"], base["wall_clock"]
        same = s["params_sha256"] == base["params_sha256"]
        lines = [
            f"Interrupted {len(kinds)} times ({', '.join(f'{k} after step {st}' for k, st in log)}), seed {a.seed}, "
            f"{a.steps} steps of `{' '.join(RUN[:3])}` on tiny.yaml, price {a.price}/h:",
            "",
            "| | uninterrupted | interrupted | difference |",
            "| --- | ---: | ---: | ---: |",
            f"| wall clock, first start to end (s) | {ref_wall:.2f} | {wall:.2f} | {wall - ref_wall:+.2f} |",
            f"| paid (s) | {bw['paid_s']:.2f} | {w['paid_s']:.2f} | {w['paid_s'] - bw['paid_s']:+.2f} |",
            f"| useful (s) | {bw['useful_s']:.2f} | {w['useful_s']:.2f} | {w['useful_s'] - bw['useful_s']:+.2f} |",
            f"| goodput | {bw['goodput']:.3f} | {w['goodput']:.3f} | |",
            f"| start-up (s) | {bw['startup_s']:.2f} | {w['startup_s']:.2f} | {w['startup_s'] - bw['startup_s']:+.2f} |",
            f"| replayed (s, steps) | {bw['replayed_s']:.2f}, {bw['replayed_steps']} | {w['replayed_s']:.2f}, "
            f"{w['replayed_steps']} | |",
            f"| stops (s) | {bw['stop_s']:.2f} | {w['stop_s']:.2f} | {w['stop_s'] - bw['stop_s']:+.2f} |",
            f"| periodic save stalls (s) | {bw['save_stall_s']:.2f} | {w['save_stall_s']:.2f} | |",
            f"| lost to interruptions (s) | 0 | {w['interruptions_s']:.2f} | |",
            f"| cost | {base['cost']['total']:.6f} | {c['total']:.6f} | {c['total'] - base['cost']['total']:+.6f} |",
            f"| cost of the interruptions | 0 | {c['interruptions']:.6f} | |",
            f"| params_sha256 | {base['params_sha256'][:16]} | {s['params_sha256'][:16]} | "
            f"{'same' if same else 'DIFFERENT'} |",
            "",
        ]
        report = "\n".join(lines)
        print(report)
        if a.out:
            with open(a.out, "a") as f:
                f.write(report + "\n")
        return 0 if same and w["interruptions"] == len(kinds) else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
