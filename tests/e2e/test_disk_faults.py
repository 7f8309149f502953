"""Disk faults during checkpoint saves: a full disk (ENOSPC), an I/O error (EIO), a read-only
file system (EROFS), injected at the write layer (DLRUN_FAULT=disk_error) and, where this
process may mount file systems, a real full tmpfs and a real read-only one. In every case the
last committed checkpoint stays intact and verifies, no partial directory is left behind, the
error says what happened, and the run stops (exit 1) or goes on as checkpoint.on_error says;
a failed final or preemption save always exits 1 (never 75: nothing new was committed)."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time

from common import DLRUN, RunDir, cfg, dlrun, expect, main, snapshot, train

TINY = cfg("tiny.yaml")  # 48 steps, a save every 5 steps


def committed(r):
    return sorted(d for d in os.listdir(r.file("checkpoints")) if re.fullmatch(r"step-\d+", d))


def leftovers(r):
    return [d for d in os.listdir(r.file("checkpoints")) if d.endswith(".tmp") or ".partial-" in d]


def test_a_full_disk_with_on_error_stop_keeps_the_last_checkpoint_and_resumes_exactly():
    with RunDir() as ref:
        train(TINY, ref.path)
        want = ref.summary()["params_sha256"]
    with RunDir() as r:
        p = train(TINY, r.path, "checkpoint.on_error=stop", env={"DLRUN_FAULT": "disk_error:ENOSPC:20"}, check=1)
        expect("No space left on device" in p.stdout and "is intact" in p.stdout, p.stdout[-1500:])
        s = r.summary()
        expect(s["status"] == "failed" and s["checkpoint"].endswith("step-00000015"), s)
        expect(not leftovers(r), f"partial directories left: {leftovers(r)}")
        dlrun("ckpt", "verify", s["checkpoint"], check=0)
        # The disk is back: resume continues from step 15 and ends exactly where an
        # uninterrupted run does.
        p = train(TINY, r.path, "checkpoint.on_error=stop", check=0)
        expect("step 15" in p.stdout or "step-00000015" in p.stdout, p.stdout[-1500:])
        expect(r.summary()["params_sha256"] == want, "the resumed run differs from the uninterrupted one")


def test_a_failing_disk_is_reported_and_training_goes_on_with_on_error_continue():
    with RunDir() as r:  # (three failures in a row would stop it: checkpoint.max_failed_saves, below)
        train(TINY, r.path, "checkpoint.max_failed_saves=4", env={"DLRUN_FAULT": "disk_error:EIO:20-30"}, check=0)
        s = r.summary()
        errors = [m for m in r.metrics() if m.get("event") == "checkpoint_error"]
        expect(s["status"] == "completed" and s["checkpoint_errors"] == 3 and len(errors) == 3, (s, errors))
        expect(all("Input/output error" in m["error"] and m["reason"] == "periodic" for m in errors), errors)
        expect(s["checkpoint"].endswith("step-00000048"), s)
        dlrun("ckpt", "verify", s["checkpoint"], check=0)
        expect(not leftovers(r), leftovers(r))
        expect(not any(d in committed(r) for d in ("step-00000020", "step-00000025", "step-00000030")), committed(r))


def test_saves_failing_in_a_row_stop_the_run_saying_what_is_at_risk():
    """on_error: continue does not train on for hours with nothing saved: the third periodic save
    failing in a row (checkpoint.max_failed_saves, default 3) stops the run with exit 1."""
    with RunDir() as r:
        p = train(TINY, r.path, env={"DLRUN_FAULT": "disk_error:ENOSPC:20"}, check=1)
        expect("3 periodic checkpoints in a row could not be written" in p.stdout, p.stdout[-1500:])
        # (async writes: the failure of step 30's save is known at the next save, step 35's)
        expect("At risk: 20 steps of training since the last committed checkpoint" in p.stdout and
               "step-00000015" in p.stdout, p.stdout[-1500:])
        s = r.summary()
        expect(s["status"] == "failed" and s["steps"] == 35 and s["checkpoint"].endswith("step-00000015"), s)
        dlrun("ckpt", "verify", s["checkpoint"], check=0)
    with RunDir() as r:  # 0: no limit, as before
        train(TINY, r.path, "checkpoint.max_failed_saves=0", env={"DLRUN_FAULT": "disk_error:ENOSPC:20-45"}, check=0)
        expect(r.summary()["checkpoint_errors"] == 6, r.summary())


def test_a_failed_final_save_is_a_failure_whatever_on_error_says():
    with RunDir() as r:
        p = train(TINY, r.path, env={"DLRUN_FAULT": "disk_error:EROFS:45"}, check=1)
        expect("Read-only file system" in p.stdout and "end checkpoint could not be written" in p.stdout,
               p.stdout[-1500:])
        s = r.summary()
        expect(s["status"] == "failed" and s["checkpoint"].endswith("step-00000040"), s)
        dlrun("ckpt", "verify", s["checkpoint"], check=0)
        expect(not leftovers(r), leftovers(r))


def test_a_failed_preemption_save_exits_1_not_75():
    with RunDir() as r:
        env = dict(os.environ, DLRUN_FAULT="disk_error:ENOSPC:10")
        p = subprocess.Popen([DLRUN, "train", TINY, "train.epochs=40", "checkpoint.max_failed_saves=0",
                              "log.progress=none", "--run-dir", r.path],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Wait for the first failed save to be reported, then preempt.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            if os.path.exists(r.file("metrics.jsonl")) and "checkpoint_error" in open(r.file("metrics.jsonl")).read():
                break
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=120)[0]
        expect(p.returncode == 1, f"exit {p.returncode}: {out[-1500:]}")
        expect("preemption checkpoint could not be written" in out, out[-1500:])
        s = r.summary()
        expect(s["checkpoint"].endswith("step-00000005"), s)
        dlrun("ckpt", "verify", s["checkpoint"], check=0)


def mount_tmpfs(path, size, ro=False):
    """Mount a tmpfs at `path`; False when this process may not (not root, no CAP_SYS_ADMIN)."""
    opts = f"size={size}" + (",ro" if ro else "")
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", path], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


# A model whose checkpoint (about 1.1 MB: weights and momentum) dwarfs the run's own files.
BIG = ("model.name=mlp", "model.hidden=[512]", "model.dropout=0")


def test_a_real_full_file_system():
    """A tmpfs with room for the run and one checkpoint, not two (the new one is written before
    retention removes the old): every later save meets a real ENOSPC."""
    with RunDir() as probe:
        train(TINY, probe.path, "train.max_steps=5", *BIG)
        one = sum(os.path.getsize(os.path.join(probe.file("checkpoints", "step-00000005"), f))
                  for f in os.listdir(probe.file("checkpoints", "step-00000005")))
    with tempfile.TemporaryDirectory(prefix="dlrun-tmpfs-") as mnt:
        size = (one * 3 // 2 // 4096 + 64) * 4096  # 1.5 checkpoints plus 256 KiB for the run's files
        if not mount_tmpfs(mnt, size):
            print("SKIP: cannot mount a tmpfs here (not root?); the injected ENOSPC tests above still ran")
            return
        try:
            run = os.path.join(mnt, "run")
            p = dlrun("train", TINY, *BIG, "log.progress=none", "checkpoint.keep_last=1", "train.epochs=1",
                      "--run-dir", run, check=1)
            expect("No space left on device" in p.stdout, p.stdout[-1500:])
            with open(os.path.join(run, "summary.json")) as f:
                s = json.load(f)
            expect(s["checkpoint"] and s["checkpoint_errors"] >= 1, s)
            dlrun("ckpt", "verify", s["checkpoint"], check=0)
            names = os.listdir(os.path.join(run, "checkpoints"))
            expect(not [n for n in names if n.endswith(".tmp")], names)
        finally:
            subprocess.run(["umount", mnt])


def test_a_read_only_run_directory_is_refused_and_left_alone():
    with tempfile.TemporaryDirectory(prefix="dlrun-rofs-") as mnt:
        if not mount_tmpfs(mnt, "1m", ro=True):
            print("SKIP: cannot mount a tmpfs here (not root?)")
            return
        try:
            before = snapshot(mnt)
            p = dlrun("train", TINY, "log.progress=none", "--run-dir", os.path.join(mnt, "run"))
            expect(p.returncode == 2 and "Read-only file system" in p.stdout and mnt in p.stdout,
                   f"exit {p.returncode}: {p.stdout[-1200:]}")
            expect(snapshot(mnt) == before, "the read-only directory changed")
        finally:
            subprocess.run(["umount", mnt])


if __name__ == "__main__":
    main([test_a_full_disk_with_on_error_stop_keeps_the_last_checkpoint_and_resumes_exactly,
          test_a_failing_disk_is_reported_and_training_goes_on_with_on_error_continue,
          test_saves_failing_in_a_row_stop_the_run_saying_what_is_at_risk,
          test_a_failed_final_save_is_a_failure_whatever_on_error_says, test_a_failed_preemption_save_exits_1_not_75,
          test_a_real_full_file_system, test_a_read_only_run_directory_is_refused_and_left_alone])
