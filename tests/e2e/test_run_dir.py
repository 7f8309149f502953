"""The run directory a user relies on: a refused or interrupted start leaves it exactly as it
was; one trainer at a time; --force sets a whole earlier run aside; each segment's config is
kept; a changed config is named at resume; notices for an earlier process are ignored."""
import os
import signal
import subprocess
import time

from common import DLRUN, RunDir, cfg, dlrun, expect, main, snapshot, train

TINY = cfg("tiny.yaml")


def test_refusals_leave_the_run_directory_as_it_was():
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=20")
        before = snapshot(r.path)
        refusals = {
            "incompatible architecture": (("model.width=16",), ()),
            "--resume never without --force": ((), ("--resume", "never")),
            "a bad --resume PATH": ((), ("--resume", r.file("no-such-checkpoint"))),
            "a notice source without a path": (("preemption.watch=file",), ()),
            "a bad --save-init path": ((), ("--resume", "never", "--force", "--save-init", "/nonexistent/dir/w.pt")),
            "a batch larger than the training set": (("data.batch_size=1024",), ()),
            "a channel mismatch": (("model.in_channels=3", "data.synthetic_shape=[3,16,16]", "data.name=fashion_mnist"), ()),
        }
        for what, (overrides, extra) in refusals.items():
            p = dlrun("train", TINY, "train.max_steps=40", *overrides, "--run-dir", r.path, *extra)
            expect(p.returncode == 2, f"{what}: exit {p.returncode}, expected 2:\n{p.stdout[-1500:]}")
            expect(snapshot(r.path) == before, f"{what}: the run directory changed")
            expect(r.summary()["status"] == "completed" and r.summary()["steps"] == 20, f"{what}: {r.summary()}")
    with RunDir() as r:  # a refused first start creates nothing at all
        target = r.file("new", "run")
        p = dlrun("train", TINY, "model.in_channels=3", "--run-dir", target)
        expect(p.returncode == 2, p.stdout[-800:])
        expect(not os.path.exists(r.file("new")), "a refused start left directories behind")


def test_a_signal_during_startup_exits_75_and_touches_nothing():
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=10")
        before = snapshot(r.path)
        p = train(TINY, r.path, "train.max_steps=30", env={"DLRUN_FAULT": "signal_during:startup"}, check=75)
        expect("during start-up" in p.stdout, p.stdout[-1000:])
        expect(snapshot(r.path) == before, "the run directory changed")
        train(TINY, r.path, "train.max_steps=30")  # the requeued run continues normally
        expect(r.summary()["steps"] == 30 and r.summary()["resumed_from_step"] == 10, r.summary())


def test_a_signal_while_libtorch_loads_exits_75_and_touches_nothing():
    """dlrun catches SIGTERM and SIGUSR1 from its first instruction (src/main.cpp): one raised by a
    shared library's initialiser, before main() and while LibTorch loads, still means "stop and
    requeue me" for `dlrun train`; other commands end by the signal as they always did."""
    lib = os.environ["DLRUN_RAISE_AT_LOAD_LIB"]
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=10")
        before = snapshot(r.path)
        for sig in ("SIGTERM", "SIGUSR1"):
            env = {"LD_PRELOAD": lib, "DLRUN_RAISE_AT_LOAD": sig}
            p = train(TINY, r.path, "train.max_steps=30", env=env, check=75)
            expect("during start-up" in p.stdout and sig in p.stdout, p.stdout[-1000:])
            expect(snapshot(r.path) == before, f"{sig}: the run directory changed")
            p = dlrun("config", "validate", TINY, env=env)
            expect(p.returncode == -getattr(signal, sig), f"config validate after {sig}: exit {p.returncode}")
        train(TINY, r.path, "train.max_steps=30")
        expect(r.summary()["steps"] == 30 and r.summary()["resumed_from_step"] == 10, r.summary())


def test_a_second_trainer_is_refused_while_the_first_runs():
    with RunDir() as r:
        env = dict(os.environ)
        env.pop("DLRUN_FAULT", None)
        first = subprocess.Popen([DLRUN, "train", TINY, "--run-dir", r.path, "train.epochs=400", "log.progress=none"],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.time() + 120
            while not os.path.exists(r.file("metrics.jsonl")) and time.time() < deadline:
                time.sleep(0.05)
            second = dlrun("train", TINY, "--run-dir", r.path, "train.epochs=400")
            expect(second.returncode == 2, f"second trainer exited {second.returncode}")
            expect(f"in use by another dlrun train (pid {first.pid}" in second.stdout, second.stdout[-800:])
            expect(first.poll() is None, "the first trainer stopped")
        finally:
            first.terminate()
            out, _ = first.communicate(timeout=120)
        expect(first.returncode == 75, f"first trainer exited {first.returncode}:\n{out[-1500:]}")
        expect(r.summary()["status"] == "interrupted", r.summary())
        expect(not os.path.exists(r.file("dlrun.lock")), "the lock file was not removed")


def test_force_sets_the_whole_earlier_run_aside():
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=12")
        old_metrics = open(r.file("metrics.jsonl")).read()
        train(TINY, r.path, "train.max_steps=6", extra=("--resume", "never", "--force"))
        aside = [d for d in os.listdir(r.path) if d.startswith("aside-")]
        expect(len(aside) == 1, os.listdir(r.path))
        kept = os.listdir(r.file(aside[0]))
        for f in ("metrics.jsonl", "summary.json", "config.yaml", "checkpoints"):
            expect(f in kept, f"{f} not set aside: {kept}")
        expect(any(f.startswith("events.out.tfevents.") for f in kept), kept)
        expect(open(r.file(aside[0], "metrics.jsonl")).read() == old_metrics, "the old metrics changed")
        s = r.summary()
        expect(s["steps"] == 6 and s["steps_lost"] == 0 and s["goodput"] == 1.0, s)
        expect(max(m["step"] for m in r.metrics()) == 6, "metrics.jsonl mixes the two runs")
        expect(r.summary()["resumed_from_step"] == -1, s)


def test_resume_with_a_changed_config_names_the_keys_and_keeps_each_segment():
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=10")
        first = open(r.file("config.yaml")).read()
        p = train(TINY, r.path, "train.max_steps=20", "optim.lr=0.02", "run.seed=9")
        expect("optim.lr: 0.05 -> 0.02" in p.stdout, p.stdout[-2500:])
        expect("run.seed: 1 -> 9" in p.stdout and "not an exact continuation" in p.stdout, p.stdout[-2500:])
        kept = r.file("config.before-step-00000010.yaml")
        expect(os.path.isfile(kept) and open(kept).read() == first, os.listdir(r.path))
        expect("lr: 0.02" in open(r.file("config.yaml")).read(), "config.yaml is not the new segment's")
        p = train(TINY, r.path, "train.max_steps=20", "optim.lr=0.02", "run.seed=9")
        expect("differs from the checkpoint" not in p.stdout, "warned although nothing changed")


def test_a_notice_file_from_an_earlier_process_is_ignored():
    with RunDir() as r:
        notice = r.file("preempt-notice")
        open(notice, "w").write("for the process before the requeue")
        old = time.time() - 600
        os.utime(notice, (old, old))
        p = train(TINY, r.path, "preemption.watch=file", f"preemption.endpoint={notice}", "preemption.poll_s=0.05")
        expect(r.summary()["status"] == "completed", r.summary())
        expect("ignoring the notice file" in p.stdout, p.stdout[-1500:])

def test_a_lock_held_from_another_host_is_waited_for_then_exit_75():
    """A run directory on a shared file system, locked by a VM that was taken away (its lease not
    yet expired): waited for up to run.lock_wait_s, then exit 75 -- requeue me -- not 2; and
    taken as soon as the other host lets go."""
    import fcntl
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=5")
        before = snapshot(r.path)
        fd = os.open(r.file("dlrun.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, b"pid 4242\nhost spot-vm-that-was-reclaimed\nsince 1764000000\n")
            t0 = time.time()
            p = dlrun("train", TINY, "--run-dir", r.path, "run.lock_wait_s=2", "log.progress=none")
            expect(p.returncode == 75, f"exit {p.returncode}: {p.stdout[-1000:]}")
            expect(time.time() - t0 >= 2, "it did not wait")
            expect("waiting up to 2 s" in p.stdout and "still locked by a dlrun on host spot-vm-that-was-reclaimed"
                   in p.stdout, p.stdout[-1000:])
            after = snapshot(r.path)
            after.pop("dlrun.lock"), before.pop("dlrun.lock", None)
            expect(after == before, "a start that waited for the lock changed the run directory")
            late = subprocess.Popen([DLRUN, "train", TINY, "--run-dir", r.path, "log.progress=none"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(1.5)
            expect(late.poll() is None, "it did not wait for the lock")
        finally:
            os.close(fd)  # the other host's lease ends
        out, _ = late.communicate(timeout=300)
        expect(late.returncode == 0, f"exit {late.returncode}: {out[-1000:]}")
        expect(r.summary()["resumed_from_step"] == 5, r.summary())


if __name__ == "__main__":
    main([test_refusals_leave_the_run_directory_as_it_was, test_a_signal_during_startup_exits_75_and_touches_nothing,
          test_a_signal_while_libtorch_loads_exits_75_and_touches_nothing,
          test_a_second_trainer_is_refused_while_the_first_runs, test_force_sets_the_whole_earlier_run_aside,
          test_resume_with_a_changed_config_names_the_keys_and_keeps_each_segment,
          test_a_notice_file_from_an_earlier_process_is_ignored,
          test_a_lock_held_from_another_host_is_waited_for_then_exit_75])
