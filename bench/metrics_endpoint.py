"""What the live metrics endpoint costs: img/s with log.metrics_port scraped every second, and without.

    python bench/metrics_endpoint.py --dlrun build/dlrun [--steps 400] [--rounds 3] [--interval 1]

Paired rounds on one machine: each round trains the same small convnet (synthetic 1x28x28,
batch 64, 2 threads) three times: without the endpoint, with it and nobody scraping, and with it
scraped every --interval seconds by a thread here (a GET of /metrics, as Prometheus makes it),
in alternating order. A run's
speed is the median of its metrics.jsonl samples_per_s (every 10 steps, the first 50 steps
left out). Reports each round's ratios, their median and spread (an effect smaller than the
spread is not a measurement), and the median time a scrape took to answer. Then one run of
--window-steps steps with the endpoint, scraped in alternate --window-s windows: the img/s of the
train lines in each scraped window over the idle window after it (the two measured seconds
apart, so the machine's drift between whole runs mostly cancels).
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


def windows(a, cfg, work):
    """One run with the endpoint; a thread scrapes it every --interval s in alternate --window-s
    windows and leaves it alone in the others. Returns, per adjacent pair of windows, the median
    img/s of the train lines logged in the scraped window over that of the idle one."""
    port = free_port()
    run = os.path.join(work, "run-windows")
    marks = []  # (start wall time, scraped?)
    stop = threading.Event()

    def scrape():
        on = True
        while not stop.is_set():
            marks.append((time.time(), on))
            end = time.time() + a.window_s
            while not stop.is_set() and time.time() < end:
                if on:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                            resp.read()
                    except OSError:
                        pass
                stop.wait(a.interval)
            on = not on
    th = threading.Thread(target=scrape, daemon=True)
    th.start()
    subprocess.run([a.dlrun, "train", cfg, "--run-dir", run, f"train.max_steps={a.window_steps}",
                    f"log.metrics_port={port}"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop.set()
    th.join()
    lines = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "event" not in m and m.get("step", 0) > 50 and m.get("samples_per_s"):
                lines.append((m["time"], m["samples_per_s"]))
    per_window = []
    for i, (start, on) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else float("inf")
        v = [s for t, s in lines if start + 0.5 < t <= end]  # a line covers the 10 steps before it
        if v:
            per_window.append((on, statistics.median(v)))
    return [x[1] / y[1] for x, y in zip(per_window, per_window[1:]) if x[0] and not y[0]]


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
    ap.add_argument("--window-s", type=float, default=4.0, help="the windows of the single-run measurement")
    ap.add_argument("--window-steps", type=int, default=2000, help="steps of the single-run measurement")
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
            arms = ("off", "idle", "scraped")
            for arm in (arms if r % 2 == 0 else arms[::-1]):
                scraped = arm == "scraped"
                run = os.path.join(work, f"run-{r}-{arm}")
                args = [a.dlrun, "train", cfg, "--run-dir", run, f"train.max_steps={a.steps}"]
                stop = threading.Event()
                scrapes = [0]
                if arm != "off":
                    port = free_port()
                    args.append(f"log.metrics_port={port}")
                if scraped:

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
                got[arm] = speed(run)
                if scraped:
                    th.join()
                    got["scrapes"] = scrapes[0]
            rounds.append(got)
            print(f"round {r + 1}: {got['off']:.0f} img/s without the endpoint, {got['idle']:.0f} with it unscraped, "
                  f"{got['scraped']:.0f} scraped ({got['scrapes']} scrapes): x{got['idle'] / got['off']:.3f}, "
                  f"x{got['scraped'] / got['off']:.3f}", flush=True)
        for arm in ("idle", "scraped"):
            ratios = [g[arm] / g["off"] for g in rounds]
            print(f"{arm}/without: median x{statistics.median(ratios):.3f}, rounds {min(ratios):.3f} to "
                  f"{max(ratios):.3f}")
        print(f"a scrape answered in {statistics.median(latencies) * 1000:.2f} ms (median of {len(latencies)})")
        pairs = windows(a, cfg, work)
        print(f"one run, scraped every {a.interval:g} s in alternate {a.window_s:g} s windows: scraped/idle median "
              f"x{statistics.median(pairs):.3f} over {len(pairs)} window pairs ({min(pairs):.3f} to {max(pairs):.3f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
