"""What the live metrics endpoint costs: img/s with log.metrics_port scraped every second, and without.

    python bench/metrics_endpoint.py --dlrun build/dlrun [--steps 400] [--rounds 3] [--interval 1]

Paired rounds on one machine: each round trains the same small convnet (synthetic 1x28x28,
batch 64, 2 threads) twice, without the endpoint and with it scraped every --interval seconds
by a thread here (a GET of /metrics, as Prometheus makes it), in alternating order. A run's
speed is the median of its metrics.jsonl samples_per_s (every 10 steps, the first 50 steps
left out). Reports each round's ratio, their median and spread (an effect smaller than the
spread is not a measurement), and the median time a scrape took to answer.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

CONFIG = """run: {name: endpoint-bench, device: cpu, seed: 1, threads: 2}
model: {name: convnet, width: 16, in_channels: 1, num_classes: 10}
data: {name: synthetic, synthetic_shape: [1, 28, 28], synthetic_train_size: 60000, synthetic_eval_size: 64,
       batch_size: 64, workers: 1, augment: []}
optim: {name: sgd, lr: 0.01, momentum: 0.9}
train: {eval_every_epochs: 0, eval_at_end: false}
log: {every_steps: 10, progress: none, tensorboard: false}
checkpoint: {every_steps: 0, keep_last: 1, at_end: false}
"""


def speed(run_dir):
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "event" not in m and m.get("step", 0) > 50 and m.get("samples_per_s"):
                out.append(m["samples_per_s"])
    return statistics.median(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlrun", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dlrun-endpoint-bench-")
    latencies = []
    try:
        cfg = os.path.join(work, "c.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        rounds = []
        for r in range(a.rounds):
            got = {}
            for scraped in ((False, True) if r % 2 == 0 else (True, False)):
                run = os.path.join(work, f"run-{r}-{int(scraped)}")
                args = [a.dlrun, "train", cfg, "--run-dir", run, f"train.max_steps={a.steps}"]
                stop = threading.Event()
                scrapes = [0]
                if scraped:
                    port = free_port()
                    args.append(f"log.metrics_port={port}")

                    def scrape(port=port):
                        while not stop.wait(a.interval):
                            t0 = time.perf_counter()
                            try:
                                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                                    resp.read()
                                latencies.append(time.perf_counter() - t0)
                                scrapes[0] += 1
                            except OSError:
                                pass  # not listening yet, or already gone
                    th = threading.Thread(target=scrape, daemon=True)
                    th.start()
                subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                stop.set()
                got[scraped] = speed(run)
                if scraped:
                    th.join()
                    got["scrapes"] = scrapes[0]
            rounds.append(got)
            print(f"round {r + 1}: {got[False]:.0f} img/s without, {got[True]:.0f} img/s with the endpoint "
                  f"({got['scrapes']} scrapes): x{got[True] / got[False]:.3f}", flush=True)
        ratios = [g[True] / g[False] for g in rounds]
        print(f"with/without: median x{statistics.median(ratios):.3f}, rounds {min(ratios):.3f} to {max(ratios):.3f}; "
              f"a scrape answered in {statistics.median(latencies) * 1000:.2f} ms (median of {len(latencies)})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
