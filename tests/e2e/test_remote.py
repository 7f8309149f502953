"""Checkpoints that outlive the VM (docs/checkpoints.md, "Remote checkpoints"), against a real
S3 implementation on 127.0.0.1 (moto, with signatures checked): uploads and listings, a fresh
VM continuing the run exactly, kills during an upload, corrupt remote objects, the service
going away and coming back, wrong credentials, SIGTERM waiting for the remote commit, the
deadline, multipart uploads, and the Young/Daly interval. No real cloud endpoint is contacted."""
import contextlib
import json
import os
import signal
import subprocess
import time

from common import DLRUN, RunDir, cfg, dlrun, environment, expect, main, train
from s3_server import S3Server

TINY = cfg("tiny.yaml")
_baseline = {}


def baseline(*overrides):
    if overrides not in _baseline:
        with RunDir() as r:
            train(TINY, r.path, *overrides)
            _baseline[overrides] = r.summary()["params_sha256"]
    return _baseline[overrides]


def run(s3, r, *overrides, env=None, check=0, extra=()):
    e = dict(s3.env)
    e.update(env or {})
    return train(TINY, r.path, *overrides, env=e, check=check, extra=extra)


def events(r, kind):
    if not os.path.exists(r.file("metrics.jsonl")):
        return []
    return [m for m in r.metrics() if m.get("event") == kind]


@contextlib.contextmanager
def training(s3, r, *overrides, env=None):
    """`dlrun train` in the background (stdout and stderr together), killed at the end if still running."""
    p = subprocess.Popen([DLRUN, "train", TINY, "--run-dir", r.path, "log.progress=none", *overrides],
                         env=environment(dict(s3.env, **(env or {}))), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def wait_for(cond, p, timeout=120):
    """Poll `cond` until it holds, `p` has exited or `timeout` seconds have passed."""
    deadline = time.time() + timeout
    while time.time() < deadline and p.poll() is None:
        try:
            if cond():
                return True
        except (OSError, json.JSONDecodeError):  # metrics.jsonl not there yet, or a line half written
            pass
        time.sleep(0.05)
    return False


def stepping(r):
    return lambda: os.path.exists(r.file("metrics.jsonl")) and r.step_losses()


def test_upload_list_verify_export():
    with S3Server() as s3, RunDir() as r:
        remote = s3.overrides("exp1")
        p = run(s3, r, *remote)
        out = p.stdout + (p.stderr or "")
        expect(s3.secret not in out and s3.key_id not in out, "a credential logged")
        s = r.summary()
        expect(s["remote"]["uploads"] >= 2 and s["remote"]["failed_attempts"] == 0, s["remote"])
        expect(s["remote"]["checkpoint"] == s3.url("exp1/step-00000048"), s["remote"])
        keys = s3.keys("exp1")
        expect(s3.read("exp1/LATEST") == b"step-00000048\n", keys)
        # Remote retention follows keep_last: 2. (A checkpoint committed while an older one is
        # still uploading replaces the one waiting, so not every local step goes up.)
        steps = sorted({k.split("/")[0] for k in keys if k.startswith("step-")})
        expect(len(steps) == 2 and steps[-1] == "step-00000048", steps)
        local = sorted(os.listdir(r.file("checkpoints", "step-00000048")))
        expect(sorted(k.split("/")[1] for k in keys if k.startswith("step-00000048/")) == local, keys)
        expect(len(events(r, "upload")) == s["remote"]["uploads"], "upload events")
        for root, _, files in os.walk(r.path):  # credentials come from the environment and stay there
            for f in files:
                data = open(os.path.join(root, f), "rb").read()
                expect(s3.secret.encode() not in data and s3.key_id.encode() not in data, f"a credential in {f}")

        ep = ("--remote-endpoint", s3.endpoint)
        p = dlrun("ckpt", "list", s3.url("exp1"), *ep, env=s3.env, check=0)
        expect("* step-00000048" in p.stdout and "complete" in p.stdout, p.stdout)
        p = dlrun("ckpt", "verify", s3.url("exp1"), *ep, env=s3.env, check=0)
        expect("step-00000048: ok" in p.stdout and "SHA-256 match" in p.stdout, p.stdout)
        out = r.file("w.pt")
        dlrun("export", "--checkpoint", s3.url("exp1"), "--format", "torch", "--output", out, *ep, env=s3.env, check=0)
        import torch
        a, b = torch.load(out), torch.load(r.file("checkpoints", "step-00000048", "model.pt"))
        expect(list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a), "export from s3 differs")


def test_a_fresh_vm_continues_the_run_exactly():
    ref = baseline()
    with S3Server() as s3:
        remote = s3.overrides("exp2")
        with RunDir() as first:  # the VM that gets a notice: saves, uploads, exits 75, its disk is gone
            run(s3, first, *remote, env={"DLRUN_FAULT": "signal_at_step:23"}, check=75)
        expect(s3.read("exp2/LATEST") == b"step-00000023\n", s3.read("exp2/LATEST"))
        with RunDir() as fresh:
            p = run(s3, fresh, *remote)
            s = fresh.summary()
            expect(s["resumed_from_step"] == 23, s)
            expect("downloading s3://" in p.stdout, p.stdout[-2000:])
            expect(s["params_sha256"] == ref, "resumed on a fresh VM: params differ from the uninterrupted run")
            # kept beside the local ones (local retention may later drop it, like any other)
            expect("the downloaded checkpoint is kept as" in p.stdout and "step-00000023" in p.stdout, p.stdout[-2000:])
            expect("history" in p.stdout and "came from s3://" in p.stdout, p.stdout[-2000:])
            continues_the_records(fresh, s, replayed=False)
        expect("history/metrics.jsonl" in s3.keys("exp2"), s3.keys("exp2"))
        # kill -9 with uploads in flight: whatever reached the bucket will do, the history with
        # each checkpoint uploaded (how far past that checkpoint it reaches is the uploader's timing)
        with RunDir() as killed:
            run(s3, killed, *s3.overrides("exp2b"), env={"DLRUN_FAULT": "abort_at_step:30"}, check=None)
            with RunDir() as fresh:
                run(s3, fresh, *s3.overrides("exp2b"))
                expect(fresh.summary()["params_sha256"] == ref, "after a kill -9: params differ")
                continues_the_records(fresh, fresh.summary(), replayed=None)


def continues_the_records(fresh, s, replayed):
    """The run directory of a fresh VM that resumed from the bucket holds the whole run's records:
    its account counts the interrupted process, metrics.jsonl and TensorBoard begin at step 1."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    w = s["wall_clock"]
    expect(w["segments"] == 2 and w["interruptions"] == 1, w)
    expect(replayed is None or (w["replayed_steps"] > 0) == replayed, w)
    steps = sorted(fresh.step_losses())
    expect(steps[0] == 1 and steps[-1] == s["steps"], steps[:3] + steps[-3:])
    acc = EventAccumulator(fresh.path)
    acc.Reload()
    tb = sorted({e.step for e in acc.Scalars("train/loss")})
    expect(tb[0] == 1 and tb[-1] == s["steps"], tb[:3] + tb[-3:])


def test_a_kill_during_an_upload_leaves_latest_complete():
    ref = baseline()
    with S3Server() as s3:
        remote = s3.overrides("exp3")
        with RunDir() as vm:
            run(s3, vm, *remote, env={"DLRUN_FAULT": "signal_at_step:12"}, check=75)  # step 12 uploaded
            p = run(s3, vm, *remote, env={"DLRUN_FAULT": "upload:files"}, check=None)  # dies uploading 15
            expect(p.returncode not in (0, 75), f"upload:files did not abort (exit {p.returncode})")
        expect(s3.read("exp3/LATEST") == b"step-00000012\n", s3.read("exp3/LATEST"))
        keys = s3.keys("exp3")
        expect("step-00000015/model.pt" in keys and "step-00000015/manifest.json" not in keys, keys)
        p = dlrun("ckpt", "list", s3.url("exp3"), "--remote-endpoint", s3.endpoint, env=s3.env, check=0)
        expect("INCOMPLETE" in p.stdout, p.stdout)
        with RunDir() as fresh:
            p = run(s3, fresh, *remote)
            expect("step-00000015" in p.stdout and "incomplete" in p.stdout, p.stdout[-2000:])
            expect(fresh.summary()["resumed_from_step"] == 12, fresh.summary())
            expect(fresh.summary()["params_sha256"] == ref, "params differ after resuming past a cut upload")


def two_stops(s3, vm, remote):
    """A run stopped at step 12, then resumed and stopped at step 17: each stop waits for its own
    upload, so the bucket holds at least two complete checkpoints (12 and 17) however slowly the
    uploads of the periodic saves in between go (the uploader skips a waiting one for a newer)."""
    run(s3, vm, *remote, env={"DLRUN_FAULT": "signal_at_step:12"}, check=75)
    run(s3, vm, *remote, env={"DLRUN_FAULT": "signal_at_step:17"}, check=75)


def test_a_corrupt_remote_object_is_detected_and_skipped():
    ref = baseline()
    with S3Server() as s3:
        remote = s3.overrides("exp4", "checkpoint.keep_last=3")
        with RunDir() as vm:
            two_stops(s3, vm, remote)
        # Complete ones only: an upload still going on at a stop gives way to the stop's own.
        older = sorted({k.split("/")[0] for k in s3.keys("exp4") if k.endswith("/manifest.json")})[:-1]
        expect(older, "only one checkpoint was uploaded")
        obj = "exp4/step-00000017/model.pt"
        data = bytearray(s3.read(obj))
        data[len(data) // 2] ^= 0x40
        s3.write(obj, bytes(data))
        p = dlrun("ckpt", "verify", s3.url("exp4/step-00000017"), "--remote-endpoint", s3.endpoint, env=s3.env,
                  check=2)
        expect("model.pt: SHA-256 mismatch" in p.stdout, p.stdout)
        with RunDir() as fresh:
            p = run(s3, fresh, *remote)
            expect("skipping checkpoint s3://" in p.stdout and "SHA-256 mismatch" in p.stdout, p.stdout[-2000:])
            expect(fresh.summary()["resumed_from_step"] == int(older[-1][5:]), (older, fresh.summary()))
            expect(fresh.summary()["params_sha256"] == ref, "params differ after skipping a corrupt remote checkpoint")


def test_a_remote_manifest_too_large_is_skipped_and_a_newer_format_stops():
    """A manifest.json over the local reader's 1 MiB cap is not read whole: the checkpoint does
    not verify and resume auto skips it. One written by a newer dlrun is not damage: resume auto
    stops on it (exit 2) rather than continue from an older step."""
    with S3Server() as s3:
        remote = s3.overrides("exp4b", "checkpoint.keep_last=3")
        with RunDir() as vm:
            two_stops(s3, vm, remote)
        key = "exp4b/step-00000017/manifest.json"
        manifest = json.loads(s3.read(key))
        older = sorted({k.split("/")[0] for k in s3.keys("exp4b") if k.endswith("/manifest.json")})[:-1]
        expect(older, "only one checkpoint was uploaded")
        s3.write(key, json.dumps(dict(manifest, format_version=2)).encode())
        with RunDir() as fresh:
            p = run(s3, fresh, *remote, check=2)
            expect("newer dlrun" in p.stdout and "step-00000017" in p.stdout, p.stdout[-1200:])
            expect(not os.path.exists(fresh.file("checkpoints")), "a refused resume wrote checkpoints")
        s3.write(key, json.dumps(dict(manifest, padding="x" * (2 << 20))).encode())
        p = dlrun("ckpt", "verify", s3.url("exp4b/step-00000017"), "--remote-endpoint", s3.endpoint, env=s3.env,
                  check=2)
        expect("manifest.json: larger than 1048576 bytes" in p.stdout, p.stdout)
        with RunDir() as fresh:
            p = run(s3, fresh, *remote)
            expect("skipping checkpoint s3://" in p.stdout and "larger than 1048576" in p.stdout, p.stdout[-2000:])
            expect(fresh.summary()["resumed_from_step"] == int(older[-1][5:]), (older, fresh.summary()))


def started(r):
    """The run is past its start-up (which waits for the store: test_remote_resume.py)."""
    return lambda: any(m.get("event") == "start" for m in r.metrics())


def test_training_goes_on_while_the_service_is_down():
    with S3Server() as s3, RunDir() as r:
        with training(s3, r, "train.epochs=150", *s3.overrides("exp5", "checkpoint.every_steps=200")) as p:
            wait_for(started(r), p)
            s3.down()
            wait_for(lambda: events(r, "upload_error"), p)
            s3.up()
            out, _ = p.communicate(timeout=600)
        expect(p.returncode == 0, f"exit {p.returncode}:\n{out[-2000:]}")
        errors, uploads = events(r, "upload_error"), events(r, "upload")
        expect(errors and uploads, f"errors {len(errors)}, uploads {len(uploads)}")
        expect(r.summary()["remote"]["failed_attempts"] >= 1 and r.summary()["remote"]["uploads"] >= 1, r.summary())
        expect(s3.read("exp5/LATEST") == b"step-00002400\n", s3.read("exp5/LATEST"))


def test_an_upload_refused_for_good_stops_the_run_only_with_on_error_stop():
    for policy in ("stop", "continue"):
        with S3Server() as s3, RunDir() as r:
            # (continue with max_failed_saves: 0 trains on whatever the store does; with the default
            # limit three uploads given up in a row stop the run: test_remote_credentials.py)
            with training(s3, r, "train.epochs=400", *s3.overrides("exp12", f"checkpoint.on_error={policy}",
                                                                   "checkpoint.max_failed_saves=0")) as p:
                wait_for(lambda: events(r, "upload"), p)
                s3.revoke()  # 403 AccessDenied from now on: not worth retrying
                wait_for(lambda: [e for e in events(r, "upload_error") if e["final"]], p)
                if policy == "continue":
                    expect(p.poll() is None, "on_error: continue, and yet the run ended")
                    p.send_signal(signal.SIGTERM)
                out, _ = p.communicate(timeout=120)
            final = [e for e in events(r, "upload_error") if e["final"]]
            expect(final and "HTTP 403" in final[0]["error"] and final[0]["attempt"] == 1, final)
            if policy == "stop":
                expect(p.returncode == 1, f"on_error: stop: exit {p.returncode}\n{out[-1500:]}")
                expect("(checkpoint.on_error: stop)" in out and "local checkpoint is intact" in out, out[-1500:])
                expect(r.summary()["status"] == "failed", r.summary())
            else:
                expect(p.returncode == 75, f"on_error: continue: exit {p.returncode}\n{out[-1500:]}")
                expect(r.summary()["remote"]["given_up"] >= 1, r.summary()["remote"])
            dlrun("ckpt", "verify", r.path, check=0)  # the local checkpoints are untouched


def test_wrong_credentials_are_refused_naming_the_bucket():
    with S3Server() as s3, RunDir() as r:
        p = run(s3, r, *s3.overrides("exp6"), env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, check=2)
        expect(f"bucket {s3.bucket}" in p.stdout and "HTTP 403" in p.stdout, p.stdout[-1500:])
        expect(not os.listdir(r.path), "a refused start wrote into the run directory")
        # The commands that read the store refuse the same way (exit 2, not a crash or exit 1).
        bad = dict(s3.env, AWS_SECRET_ACCESS_KEY="not-the-secret")
        ep = ("--remote-endpoint", s3.endpoint)
        for args, env in ((("ckpt", "list", s3.url("exp6")), bad), (("ckpt", "verify", s3.url("exp6/step-00000001")), bad),
                          (("ckpt", "list", "s3://no-such-bucket/x"), s3.env)):
            p = dlrun(*args, *ep, env=env, check=2)
            expect("HTTP 403" in p.stdout or "HTTP 404" in p.stdout, (args, p.stdout))


def test_sigterm_exits_75_after_the_remote_commit():
    with S3Server() as s3, RunDir() as r:
        with training(s3, r, "train.epochs=400", *s3.overrides("exp7")) as p:
            wait_for(stepping(r), p)
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=120)
        expect(p.returncode == 75, f"exit {p.returncode}:\n{out[-2000:]}")
        ev = events(r, "preempt")[0]
        expect(ev["remote_commit_time"] >= ev["commit_time"] >= ev["signal_time"], ev)
        local = open(r.file("checkpoints", "LATEST")).read()
        expect(s3.read("exp7/LATEST").decode() == local, f"remote LATEST is not {local}")
        expect("remote checkpoint" in out and "committed" in out, out[-1500:])


def test_the_deadline_bounds_the_wait_for_an_upload():
    # "down": every connection is refused at once; "stalled": the upload is accepted and hangs,
    # so exiting in time needs the transfer under way abandoned, not just the retries stopped.
    for mode in ("down", "stalled"):
        with S3Server() as s3, RunDir() as r:
            with training(s3, r, "train.epochs=400", *s3.overrides("exp8", "preemption.deadline_s=2")) as p:
                wait_for(stepping(r), p)
                if mode == "down":
                    s3.down()
                else:
                    s3.stall()
                t0 = time.time()
                p.send_signal(signal.SIGTERM)
                out, _ = p.communicate(timeout=120)
                took = time.time() - t0
            expect(p.returncode == 75, f"{mode}: exit {p.returncode}:\n{out[-2000:]}")
            expect(took < 6, f"{mode}: exit 75 came {took:.1f} s after SIGTERM with a 2 s deadline")
            ev = events(r, "preempt")[0]
            expect(ev["remote_commit_time"] is None and "deadline" in ev["remote_note"], (mode, ev))
            expect("did not finish within the 2 s deadline" in out, out[-1500:])
            expect(os.path.exists(r.file("checkpoints", open(r.file("checkpoints", "LATEST")).read().strip())),
                   f"{mode}: no local checkpoint")


def test_large_files_go_up_in_parts():
    with S3Server() as s3, RunDir() as r:
        # An mlp whose first layer is 6.4 MB: above a 5 MiB part size, so it goes up in two parts.
        big = ("model.name=mlp", "model.hidden=[2048]", "data.synthetic_shape=[1,28,28]", "train.max_steps=2",
               "checkpoint.every_steps=0", "checkpoint.remote_part_mb=5")
        run(s3, r, *s3.overrides("exp9", *big))
        size = os.path.getsize(r.file("checkpoints", "step-00000002", "model.pt"))
        expect(size > 5 * 2**20, size)
        head = s3.client().head_object(Bucket=s3.bucket, Key="exp9/step-00000002/model.pt")
        expect(head["ETag"].strip('"').endswith("-2"), f"not a 2-part upload: {head['ETag']}")
        p = dlrun("ckpt", "verify", s3.url("exp9/step-00000002"), "--remote-endpoint", s3.endpoint, env=s3.env, check=0)
        expect("SHA-256 match" in p.stdout, p.stdout)


def test_every_minutes_auto_uses_the_measured_save_cost():
    with S3Server() as s3, RunDir() as r:
        p = run(s3, r, *s3.overrides("exp10", "checkpoint.every_minutes=auto", "preemption.mtbf_hours=0.0001",
                                     "checkpoint.every_steps=0"))
        saves = [m for m in events(r, "checkpoint") if m["reason"] == "every_minutes"]
        expect(saves and saves[0]["step"] == 1, "the first save (to measure its cost) is not at step 1")
        iv = events(r, "checkpoint_interval")
        expect(iv and iv[0]["save_cost_s"] > 0 and iv[0]["minutes"] > 0, iv)
        expect("checkpoint.every_minutes=auto: every" in p.stdout, p.stdout[-1500:])
    # No upload succeeds while it trains: the stall alone stands in for the cost, not a save at
    # every step. (The service goes down once the run has started -- a start waits for it -- and
    # comes back at the end, so the final wait is short.)
    with S3Server() as s3, RunDir() as r:
        with training(s3, r, *s3.overrides("exp11", "checkpoint.every_minutes=auto", "preemption.mtbf_hours=0.001",
                                            "checkpoint.every_steps=0")) as p:
            wait_for(started(r), p)
            s3.down()
            wait_for(lambda: 48 in r.step_losses(), p)
            s3.up()
            out, _ = p.communicate(timeout=120)
        expect(p.returncode == 0, f"exit {p.returncode}: {out[-1500:]}")
        saves = [m for m in events(r, "checkpoint") if m["reason"] == "every_minutes"]
        expect(1 <= len(saves) < 16, f"{len(saves)} saves in 48 steps while no upload succeeded")


if __name__ == "__main__":
    main([test_upload_list_verify_export, test_a_fresh_vm_continues_the_run_exactly,
          test_a_kill_during_an_upload_leaves_latest_complete, test_a_corrupt_remote_object_is_detected_and_skipped,
          test_a_remote_manifest_too_large_is_skipped_and_a_newer_format_stops,
          test_training_goes_on_while_the_service_is_down,
          test_an_upload_refused_for_good_stops_the_run_only_with_on_error_stop,
          test_wrong_credentials_are_refused_naming_the_bucket,
          test_sigterm_exits_75_after_the_remote_commit, test_the_deadline_bounds_the_wait_for_an_upload,
          test_large_files_go_up_in_parts, test_every_minutes_auto_uses_the_measured_save_cost])
