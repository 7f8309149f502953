#!/usr/bin/env python3
"""Soak test: many cycles of train -> interrupt at a random moment -> resume, on the CPU.

Each interruption is one of:
  SIGTERM, SIGUSR1  a graceful stop: exit 75 (or 0 when the run had just finished)
  SIGKILL           at a random moment, often in the middle of a background checkpoint write
  abort in a save   DLRUN_FAULT=ckpt:POINT, a crash at a chosen point of the commit protocol
Every restart must resume from a checkpoint that verifies (the log names it and reports no
skipped or corrupt checkpoint), and every run, once it completes, must end with the same
params_sha256 as the uninterrupted run of the same config. A run is restarted until it
completes; then a fresh run directory starts. One cycle = one interruption and its resume.

  bench/soak.py --dlrun build/dlrun --cycles 1000 [--nproc 2] [--seed S] [--report FILE]

With --nproc 2 each run is two DDP processes on gloo started by scripts/dlrun-launch; signals
go to the launcher (which forwards them), SIGKILL to the launcher and every process below it.

Prints one line per completed run and a summary; exit 1 on any failure (the run directory of
a failure is kept and named). docs/reliability.md has the figures.
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "soak.yaml")
POINTS = ["file", "files", "manifest", "rename", "latest"]


LAUNCH = os.path.join(HERE, "..", "scripts", "dlrun-launch")
NPROC = 1  # --nproc: processes per run, started by scripts/dlrun-launch when above 1


def command(dlrun, run_dir):
    if NPROC == 1:
        return [dlrun, "train", CONFIG, "--run-dir", run_dir]
    with socket.socket() as s:  # a free port for this start's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [sys.executable, LAUNCH, "--nproc-per-node", str(NPROC), "--master-port", str(port), "--", dlrun, "train",
            CONFIG, "dist.backend=gloo", "--run-dir", run_dir]


def run_to_end(dlrun, run_dir, env=None):
    p = subprocess.run(command(dlrun, run_dir), env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return p.returncode, p.stdout


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def descendants(pid):
    """The pids of every process below `pid` (from /proc: the launcher starts its workers in
    sessions of their own, so the launcher's process group does not hold them)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(pid):
    """SIGKILL `pid` and everything below it, as a machine that goes away does."""
    for p in [pid] + descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def one_start(dlrun, run_dir, kind, rng, max_delay):
    """Start training in run_dir, interrupt it as `kind` says; return (exit code, output)."""
    env = dict(os.environ)
    env.pop("DLRUN_FAULT", None)
    if kind == "abort":
        env["DLRUN_FAULT"] = "ckpt:" + rng.choice(POINTS)
    out = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen(command(dlrun, run_dir), env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    if kind in ("SIGTERM", "SIGUSR1", "SIGKILL"):
        deadline = time.monotonic() + rng.uniform(0.05, max_delay)
        while time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.005)
        if p.poll() is None:
            if kind == "SIGKILL":  # the machine goes away: every process of the run at once
                kill_tree(p.pid)
            else:
                p.send_signal(getattr(signal, kind))
    try:
        code = p.wait(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        code = "hang"
    out.seek(0)
    return code, out.read()


def check_start(kind, code, text):
    """The reason this start is a failure, or None."""
    if code == "hang":
        return "did not exit within 300 s"
    for bad in ("does not verify", "corrupt", "Traceback", "Segmentation", "AddressSanitizer"):
        if bad in text:
            return f"output mentions {bad!r}"
    # dlrun catches the signals from its first instruction (an ELF preinit entry, before LibTorch
    # loads); one that arrives while the executable is still being mapped ends it by the default
    # action: nothing was written yet, and the next start begins where the last checkpoint left
    # off. It prints nothing first. (Through the launcher such a start exits 75.)
    if code in (-signal.SIGTERM, -signal.SIGUSR1) and kind.startswith("SIG") and not text.strip():
        return None
    if NPROC > 1 and kind == "abort" and code != 0:
        return None  # the launcher reports a worker's abort with its own exit code
    allowed = {
        "SIGTERM": {75, 0},
        "SIGUSR1": {75, 0},
        "SIGKILL": {-9, 0, 75},
        "abort": {-6, 0},  # no save reached before the end: it finishes
    }[kind]
    if code not in allowed:
        return f"exit {code}, expected one of {sorted(allowed)}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlrun", default=os.path.join(HERE, "..", "build", "dlrun"))
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--max-delay", type=float, default=0,
                    help="latest signal, seconds after start (default: the uninterrupted run's wall time)")
    ap.add_argument("--max-minutes", type=float, default=0, help="stop starting new cycles after this long (0: no limit)")
    ap.add_argument("--nproc", type=int, default=1, help="processes per run (scripts/dlrun-launch, gloo)")
    ap.add_argument("--report", help="append the summary line to this file")
    args = ap.parse_args()
    global NPROC
    NPROC = args.nproc
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"soak: seed {seed} (--seed {seed} repeats it), {args.cycles} cycles", flush=True)

    base = tempfile.mkdtemp(prefix="dlrun-soak-")
    ref_dir = os.path.join(base, "reference")
    t_ref = time.monotonic()
    code, text = run_to_end(args.dlrun, ref_dir)
    t_ref = time.monotonic() - t_ref
    max_delay = args.max_delay or t_ref
    if code != 0:
        print(text)
        sys.exit(f"soak: the uninterrupted reference run failed (exit {code})")
    reference = summary(ref_dir)["params_sha256"]
    print(f"soak: reference params_sha256 {reference[:16]}…, {t_ref:.1f} s uninterrupted; signals within "
          f"{max_delay:.1f} s of each start", flush=True)

    counts = {k: 0 for k in ("SIGTERM", "SIGUSR1", "SIGKILL", "abort")}
    cycles = runs = failures = early = 0
    t0 = time.monotonic()
    out_of_time = lambda: args.max_minutes > 0 and time.monotonic() - t0 > 60 * args.max_minutes
    while cycles < args.cycles and failures == 0 and not out_of_time():
        run_dir = os.path.join(base, f"run-{runs}")
        runs += 1
        interrupts = 0
        while True:
            kind = rng.choice(list(counts)) if cycles < args.cycles and not out_of_time() else None
            if kind is None:  # cycles done: finish this run without interrupting it
                code, text = run_to_end(args.dlrun, run_dir)
                why = None if code == 0 else f"final resume exited {code}"
            else:
                code, text = one_start(args.dlrun, run_dir, kind, rng, max_delay)
                why = check_start(kind, code, text)
                # Only a start that was really interrupted counts (a signal that came after the
                # run had finished, or an abort point no save reached, is just a run to the end).
                if code != 0 and (not text.strip() or "while still loading" in text):
                    early += 1  # killed while the executable was being mapped: counted apart
                if code != 0:
                    counts[kind] += 1
                    cycles += 1
                    interrupts += 1
            if why:
                failures += 1
                print(f"soak: FAILURE in {run_dir} ({kind}): {why}\n{text[-3000:]}", flush=True)
                break
            if code == 0:
                got = summary(run_dir)["params_sha256"]
                if got != reference:
                    failures += 1
                    print(f"soak: FAILURE in {run_dir}: params_sha256 {got[:16]}… != reference", flush=True)
                else:
                    print(f"soak: run {runs} completed after {interrupts} interruptions, params_sha256 equal "
                          f"({cycles}/{args.cycles} cycles, {time.monotonic() - t0:.0f} s)", flush=True)
                    shutil.rmtree(run_dir, ignore_errors=True)
                break

    line = (f"soak: {cycles} interruptions and resumes in {runs} runs, {time.monotonic() - t0:.0f} s: "
            + ", ".join(f"{k} {v}" for k, v in counts.items())
            + f" ({early} of the signals before dlrun could catch them), failures {failures}, seed {seed}")
    print(line, flush=True)
    if args.report:
        with open(args.report, "a") as f:
            f.write(line + "\n")
    if failures == 0:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"soak: kept {base}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
