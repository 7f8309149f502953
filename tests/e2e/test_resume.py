"""Exact resume (DESIGN.md §4 determinism contract): a run killed at any step, or at any
file-write point of a checkpoint save, and resumed, ends with the same params_sha256 as an
uninterrupted run — mid-epoch, at epoch boundaries, with several loader workers."""
import os
import random
import signal
import subprocess
import time

from common import DLRUN, RunDir, cfg, dlrun, expect, main, train

TINY = cfg("tiny.yaml")
SYNC = "checkpoint.async=false"  # where a test needs the save before the kill to be committed
_baseline = {}


def baseline():
    if "sha" not in _baseline:
        with RunDir() as r:
            train(TINY, r.path)
            _baseline["sha"] = r.summary()["params_sha256"]
    return _baseline["sha"]


def abort_then_resume(r, step, *overrides):
    p = train(TINY, r.path, *overrides, env={"DLRUN_FAULT": f"abort_at_step:{step}"}, check=None)
    expect(p.returncode != 0 and p.returncode != 75, f"abort_at_step:{step} exited {p.returncode}")
    train(TINY, r.path, *overrides)  # --resume auto is the default
    return r.summary()


def test_kill_at_random_steps():
    rng = random.Random(int(os.environ.get("DLRUN_TEST_SEED", "1234")))
    # Mid-epoch (7), right after a checkpoint (10), an epoch boundary (16), plus random ones.
    steps = [7, 10, 16] + rng.sample(range(1, 48), 3)
    print(f"kill steps: {steps} (DLRUN_TEST_SEED={os.environ.get('DLRUN_TEST_SEED', '1234')})")
    for k in steps:
        with RunDir() as r:
            s = abort_then_resume(r, k)
            expect(s["status"] == "completed", s["status"])
            expect(s["params_sha256"] == baseline(), f"killed at step {k}: params differ after resume")
            # The abort comes before step k's own save; an async save may not have committed.
            expect(s["resumed_from_step"] < k, f"killed at {k}: resumed from {s['resumed_from_step']}")


def test_external_kill_9():
    """A real SIGKILL from outside, at whatever step the process has reached."""
    with RunDir() as r:
        env = dict(os.environ)
        env.pop("DLRUN_FAULT", None)
        p = subprocess.Popen([DLRUN, "train", TINY, "--run-dir", r.path, "train.epochs=30"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 120
            while time.time() < deadline:
                if os.path.exists(r.file("checkpoints", "LATEST")):
                    break
                time.sleep(0.05)
            time.sleep(0.3)
            p.send_signal(signal.SIGKILL)
        finally:
            p.wait()
        expect(p.returncode == -signal.SIGKILL, f"exit {p.returncode}")
        train(TINY, r.path, "train.epochs=30")
        with RunDir() as ref:
            train(TINY, ref.path, "train.epochs=30")
            expect(r.summary()["params_sha256"] == ref.summary()["params_sha256"], "kill -9 + resume differs")
        expect(r.summary()["resumed_from_step"] > 0, "did not resume")


def test_kill_at_every_checkpoint_write_point():
    points = ["file", "files", "manifest", "rename", "latest"]
    for point in points:
        with RunDir() as r:
            # Reach step 12 (checkpoints 5 and 10 committed), then die inside the save at step 15.
            train(TINY, r.path, SYNC, env={"DLRUN_FAULT": "abort_at_step:12"}, check=None)
            p = train(TINY, r.path, SYNC, env={"DLRUN_FAULT": f"ckpt:{point}"}, check=None)
            expect(p.returncode not in (0, 75), f"ckpt:{point} did not abort (exit {p.returncode})")
            v = dlrun("ckpt", "verify", os.path.join(r.path, "checkpoints",
                                                     open(r.file("checkpoints", "LATEST")).read().strip()))
            expect(v.returncode == 0, f"after a crash at {point}, LATEST does not verify:\n{v.stdout}")
            train(TINY, r.path, SYNC)
            expect(r.summary()["params_sha256"] == baseline(), f"crash at ckpt:{point}: params differ after resume")


def test_corrupt_checkpoint_is_skipped_not_deleted():
    with RunDir() as r:
        train(TINY, r.path, SYNC, env={"DLRUN_FAULT": "abort_at_step:12"}, check=None)
        bad = r.file("checkpoints", "step-00000010", "model.pt")
        with open(bad, "r+b") as f:
            f.seek(200)
            b = f.read(1)
            f.seek(200)
            f.write(bytes([b[0] ^ 0x40]))
        os.makedirs(r.file("checkpoints", "step-00000011.tmp"))  # a partial write left behind
        p = train(TINY, r.path, SYNC)
        expect("skipping checkpoint" in p.stdout and "step-00000010" in p.stdout, p.stdout[-2000:])
        expect(r.summary()["resumed_from_step"] == 5, f"resumed from {r.summary()['resumed_from_step']}")
        expect(r.summary()["params_sha256"] == baseline(), "params differ after skipping a corrupt checkpoint")
        expect(os.path.isdir(r.file("checkpoints", "step-00000011.tmp")), "partial checkpoint was deleted")


def test_steps_lost_and_goodput():
    with RunDir() as r:
        s = abort_then_resume(r, 13, SYNC)  # checkpoint at 10, logged up to 13: 3 steps lost
        expect(s["steps_lost"] == 3, f"steps_lost {s['steps_lost']}")
        expect(abs(s["goodput"] - 48 / 51) < 1e-9, f"goodput {s['goodput']}")


if __name__ == "__main__":
    main([test_kill_at_random_steps, test_external_kill_9, test_kill_at_every_checkpoint_write_point,
          test_corrupt_checkpoint_is_skipped_not_deleted, test_steps_lost_and_goodput])
