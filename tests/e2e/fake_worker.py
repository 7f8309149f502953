"""A stand-in for a dlrun worker, started by scripts/dlrun-launch in tests/e2e/test_launch.py.

It records what it saw in $FAKE_OUT_DIR/rank<RANK>-restart<TORCHELASTIC_RESTART_COUNT>.json
(argv, the launcher's variables, its pid and session, the signals it received; rewritten on each
signal), writes some output, and then behaves as $FAKE_MODE says. FAKE_MODE is a comma-separated
list of modes, one per global rank (the last one applies to the ranks beyond the list):

  ok                    exit 0
  exit75                exit 75 (interrupted with a checkpoint)
  fail                  exit 3 (once every rank of this restart has written its record)
  bad_input             exit 2 (a refused config or data), likewise
  crash                 kill itself with SIGKILL
  fail_until_restart_N  exit 3 while TORCHELASTIC_RESTART_COUNT < N, then exit 0
  wait_for_signal       wait for SIGTERM/SIGINT/SIGUSR1, then exit 75 (what dlrun does) after
                        $FAKE_SAVE_S seconds (default 0: the checkpoint save)
  fail_on_signal        wait for a signal, then exit 3
  startup_stop          wait for a signal, then say what dlrun says of a stop during start-up
                        ("... nothing trained yet ...", rank 0 only) and exit 75
  ignore_term           record the signals but never exit (only SIGKILL ends it)
  with_child            start a child process (as a data loader or a shell would), then behave as
                        wait_for_signal; the child records a signal it receives in
                        $FAKE_OUT_DIR/child<RANK>.signal and exits
  default_signals       no handlers (a process still loading): the first signal ends it

Output: FAKE_LINES (default 3) lines on stdout and on stderr, then a last stdout line without
a newline ("tail of rank R").
"""
import json
import os
import signal
import subprocess
import sys
import time

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
            "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS", "FAKE_VIA_WRAPPER")
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

rank = int(os.environ["RANK"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
modes = os.environ.get("FAKE_MODE", "ok").split(",")
mode = modes[min(rank, len(modes) - 1)]
record = {"rank": rank, "argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in ENV_KEYS},
          "pid": os.getpid(), "sid": os.getsid(0), "signals": []}
path = os.path.join(os.environ["FAKE_OUT_DIR"], f"rank{rank}-restart{restart}.json")


def save():
    """Write the record atomically, so that a test never reads half of it."""
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def on_signal(signum, _frame):
    record["signals"].append(signal.Signals(signum).name)
    save()


for sig in HANDLED:
    signal.signal(sig, signal.SIG_DFL if mode == "default_signals" else on_signal)
save()  # after the handlers are in place: a test that sees the file can signal the worker

for i in range(int(os.environ.get("FAKE_LINES", "3"))):
    # Long lines through Python's block buffering: the launcher receives them cut mid-line.
    print(f"line {i} of rank {rank} " + "x" * 100)
    print(f"err {i} of rank {rank}", file=sys.stderr)
sys.stdout.write(f"tail of rank {rank}")
sys.stdout.flush()
sys.stderr.flush()


def peers_started():
    """A failing worker first waits (10 s at most) until every rank of this restart has written its
    record: otherwise, on a busy machine, the launcher stops a peer before its interpreter has
    started, and a test that counts the records sees one missing."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    names = [f"rank{r}-restart{restart}.json" for r in range(world)]
    deadline = time.time() + 10
    while time.time() < deadline and not all(os.path.exists(os.path.join(os.environ["FAKE_OUT_DIR"], n))
                                              for n in names):
        time.sleep(0.01)


if mode == "ok":
    sys.exit(0)
if mode == "exit75":
    sys.exit(75)
if mode == "fail":
    peers_started()
    sys.exit(3)
if mode == "bad_input":
    peers_started()
    sys.exit(2)
if mode == "crash":
    os.kill(os.getpid(), signal.SIGKILL)
if mode.startswith("fail_until_restart_"):
    if restart < int(mode.rsplit("_", 1)[1]):
        peers_started()
        sys.exit(3)
    sys.exit(0)
CHILD = """
import os, signal, sys, time
def on(signum, _):
    with open(sys.argv[1], "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGTERM, on)
open(sys.argv[1] + ".ready", "w").close()
time.sleep(120)
"""
if mode == "with_child":
    child_file = os.path.join(os.environ["FAKE_OUT_DIR"], f"child{rank}.signal")
    subprocess.Popen([sys.executable, "-c", CHILD, child_file])  # same process group as this worker
    while not os.path.exists(child_file + ".ready"):
        time.sleep(0.01)
    mode = "wait_for_signal"
if mode in ("wait_for_signal", "fail_on_signal", "startup_stop"):
    while not record["signals"]:
        time.sleep(0.02)
    if mode == "fail_on_signal":
        sys.exit(3)
    if mode == "startup_stop":
        if rank == 0:
            print("dlrun: warning: SIGTERM received during start-up (after loading data): nothing trained yet, the "
                  "run directory is unchanged; exiting with code 75", file=sys.stderr, flush=True)
        sys.exit(75)
    time.sleep(float(os.environ.get("FAKE_SAVE_S", "0")))
    sys.exit(75)
if mode in ("ignore_term", "default_signals"):
    while True:
        time.sleep(1)
sys.exit(f"fake_worker: unknown FAKE_MODE {mode!r}")
