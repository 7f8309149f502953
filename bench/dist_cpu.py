#!/usr/bin/env python3
"""CPU data parallelism, side by side on one machine (docs/benchmarks.md, "Distributed"):

  A  1 process x 2 threads               (dlrun train, run.threads=2)
  B  2 processes x 1 thread, DDP on gloo  (scripts/dlrun-launch --nproc-per-node 2, run.threads=1)
  C  2 independent 1-thread processes, each on half the global batch, at the same time
     (no communication: what B would reach if the all-reduce cost nothing)
  D  1 process x 1 thread                (dlrun train, run.threads=1)
  E  D as a world of one through the launcher with dist.backend=gloo (process group, Reducer,
     per-step collectives on one rank): E / D is what the distributed machinery itself costs

Throughput is the mean samples/s of the train records after a warm-up, global batch counted
once. The all-reduce share of a B step is estimated as 1 - B / C. Alternating A, B, C for
--repeat rounds; medians reported.

  bench/dist_cpu.py --dlrun build/dlrun [--steps 120] [--repeat 3]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

from runlog import mean_samples_per_s  # noqa: E402  (bench/, next to this script)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sps(run_dir, warmup):
    return mean_samples_per_s(run_dir, warmup)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlrun", default=os.path.join(ROOT, "build", "dlrun"))
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    cfg = os.path.join(ROOT, "configs", "quickstart.yaml")
    common = [f"train.max_steps={a.steps}", "log.every_steps=10", "log.progress=none", "train.eval_at_end=false",
              "train.eval_every_epochs=0", "checkpoint.at_end=false", "checkpoint.every_minutes=0",
              "checkpoint.every_steps=0", "data.workers=1",
              "model.width=32", "model.channels_last=false"]  # the width-32 NCHW convnet these figures were taken with
    warm = a.steps // 4
    res = {"A": [], "B": [], "C": [], "D": [], "E": []}
    env = dict(os.environ)
    for _ in range(a.repeat):
        with tempfile.TemporaryDirectory() as t:
            ra = os.path.join(t, "a")
            subprocess.run([a.dlrun, "train", cfg, *common, "run.threads=2", "--run-dir", ra], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            res["A"].append(sps(ra, warm))
            rb = os.path.join(t, "b")
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "dlrun-launch"), "--nproc-per-node", "2",
                            "--master-port", str(free_port()), "--", a.dlrun, "train", cfg, *common, "run.threads=1",
                            "--run-dir", rb], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            res["B"].append(sps(rb, warm))
            # C: the same per-process work as B (half the global batch each), no collectives.
            batch = int(subprocess.run([a.dlrun, "config", "show", cfg], capture_output=True, text=True)
                        .stdout.split("batch_size:")[1].split()[0])
            procs, dirs = [], []
            for i in range(2):
                d = os.path.join(t, f"c{i}")
                dirs.append(d)
                procs.append(subprocess.Popen([a.dlrun, "train", cfg, *common, "run.threads=1",
                                               f"data.batch_size={batch // 2}", "--run-dir", d],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
            for p in procs:
                if p.wait() != 0:
                    raise SystemExit("an independent run failed")
            res["C"].append(sum(sps(d, warm) for d in dirs))
            rd = os.path.join(t, "d")
            subprocess.run([a.dlrun, "train", cfg, *common, "run.threads=1", "--run-dir", rd], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            res["D"].append(sps(rd, warm))
            re_ = os.path.join(t, "e")
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "dlrun-launch"), "--nproc-per-node", "1",
                            "--master-port", str(free_port()), "--", a.dlrun, "train", cfg, *common, "run.threads=1",
                            "dist.backend=gloo", "--run-dir", re_], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=env)
            res["E"].append(sps(re_, warm))
    med = {k: statistics.median(v) for k, v in res.items()}
    out = {"samples_per_s": med, "runs": res, "B_over_A": med["B"] / med["A"],
           "allreduce_share_of_B_step": 1 - med["B"] / med["C"], "E_over_D": med["E"] / med["D"], "steps": a.steps, "repeat": a.repeat}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
