"""A requeued job on a fresh VM never starts over (docs/checkpoints.md, "Resume"), against a real
S3 implementation on 127.0.0.1 (moto, signatures checked): a store that does not answer is
waited for and then exit 75; a prefix whose checkpoints all fail to verify is refused; LATEST
wins over the steps of a timeline abandoned by `--resume PATH`, which are set aside locally and
remotely; remote retention removes incomplete uploads and unfinished multipart uploads; answers
that are not S3's are refused with a clear error, a 64 MiB hostile listing included."""
import json
import os
import threading
import time

from common import RunDir, dlrun, expect, main
from s3_server import FixedAnswer, S3Server
from test_remote import TINY, baseline, events, run, training, two_stops, wait_for


def test_a_requeue_waits_for_the_store_and_never_starts_over():
    ref = baseline()
    with S3Server() as s3:
        remote = s3.overrides("wait1")
        with RunDir() as first:
            run(s3, first, *remote, env={"DLRUN_FAULT": "signal_at_step:12"}, check=75)
        s3.down()
        with RunDir() as fresh:  # the store stays down past checkpoint.remote_wait_s: 75, nothing written
            t0 = time.time()
            p = run(s3, fresh, *remote, "checkpoint.remote_wait_s=3", check=75)
            expect("did not answer" in p.stdout and "never starting over" in p.stdout, p.stdout[-1500:])
            expect("retry 1" in p.stdout, p.stdout[-1500:])
            expect(not os.listdir(fresh.path), f"a start that waited for the store wrote {os.listdir(fresh.path)}")
            expect(time.time() - t0 < 120, "the wait is not bounded")
        with RunDir() as fresh:  # down at the start, back a little later: resumes at the committed step
            with training(s3, fresh, *remote) as p:
                out = []
                reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)
                reader.start()
                deadline = time.time() + 60
                while time.time() < deadline and not any("retry 2" in line for line in out):
                    time.sleep(0.1)
                s3.up()
                p.wait(timeout=300)
                reader.join(timeout=10)
            expect(p.returncode == 0, f"exit {p.returncode}: {''.join(out)[-1500:]}")
            s = fresh.summary()
            expect(s["resumed_from_step"] == 12, s)
            expect(s["params_sha256"] == ref, "after waiting for the store: params differ from the uninterrupted run")


def test_a_prefix_whose_checkpoints_all_fail_is_not_started_over():
    with S3Server() as s3:
        remote = s3.overrides("broken", "checkpoint.keep_last=3")
        with RunDir() as vm:
            two_stops(s3, vm, remote)
        complete = sorted({k.split("/")[0] for k in s3.keys("broken") if k.endswith("/manifest.json")})
        expect(len(complete) >= 2, complete)
        for name in complete:
            key = f"broken/{name}/model.pt"
            data = bytearray(s3.read(key))
            data[len(data) // 2] ^= 0x40
            s3.write(key, bytes(data))
        with RunDir() as fresh:
            p = run(s3, fresh, *remote, check=2)
            expect("none of them verifies" in p.stdout and "refusing to start over" in p.stdout, p.stdout[-1500:])
            expect(not os.listdir(fresh.path), "a refused resume wrote into the run directory")
            p = run(s3, fresh, *remote, extra=("--resume", "never"), check=2)
            expect("--force to set them aside" in p.stdout, p.stdout[-1500:])
            p = run(s3, fresh, *remote, extra=("--resume", "never", "--force"))
            expect(fresh.summary()["resumed_from_step"] == -1, fresh.summary())  # a fresh start
            keys = s3.keys("broken")
            aside = sorted({k.split("/")[0] for k in keys if ".aside-" in k.split("/")[0]})
            expect(len(aside) >= len(complete), aside)
            # the earlier run's history set aside with its checkpoints: the store's is this run's
            expect(any(k.startswith("history.aside-") and k.endswith("/metrics.jsonl") for k in keys), keys)
            history = [k for k in keys if k.startswith("history/")]
            expect(len([k for k in history if "tfevents" in k]) == 1, history)
            steps = [json.loads(line).get("step") for line in s3.read("broken/history/metrics.jsonl").splitlines()]
            expect(steps[0] == 0 and steps[-1] == 48, steps[:3] + steps[-3:])
            expect(s3.read("broken/LATEST") == b"step-00000048\n", s3.read("broken/LATEST"))


def test_latest_wins_over_an_abandoned_timeline():
    """A run finished (steps 5 ... 48, locally and in the bucket); the user rolls back to step 15
    (`--resume PATH`) and is preempted at step 17. The steps after 15 belong to the abandoned
    timeline: they are set aside, locally and in the bucket, and a later --resume auto (same VM
    or a fresh one) and `dlrun eval --checkpoint auto` take step 17, not 48. Killed before any
    save instead, the run leaves LATEST naming step 15, which the next resume takes."""
    ref = baseline()
    with S3Server() as s3:
        remote = s3.overrides("rollback", "checkpoint.keep_last=0")
        with RunDir() as vm:
            run(s3, vm, *remote)
            step15 = vm.file("checkpoints", "step-00000015")
            run(s3, vm, *remote, env={"DLRUN_FAULT": "signal_at_step:17"}, extra=("--resume", step15), check=75)
            local = os.listdir(vm.file("checkpoints"))
            expect("step-00000048" not in local and any(n.startswith("step-00000048.abandoned-") for n in local), local)
            expect(open(vm.file("checkpoints", "LATEST")).read() == "step-00000017\n", "local LATEST")
            keys = s3.keys("rollback")
            expect(s3.read("rollback/LATEST") == b"step-00000017\n", s3.read("rollback/LATEST"))
            expect(not any(k.startswith("step-00000048/") for k in keys), keys)
            expect(any(k.startswith("step-00000048.abandoned-") and k.endswith("/manifest.json") for k in keys), keys)
            p = dlrun("eval", TINY, "--checkpoint", "auto", "--run-dir", vm.path, "--json", check=0)
            expect(json.loads(p.stdout.strip().splitlines()[-1])["checkpoint"].endswith("step-00000017"), p.stdout)
            with RunDir() as fresh:  # a requeue on a fresh VM
                run(s3, fresh, *remote)
                s = fresh.summary()
                expect(s["resumed_from_step"] == 17, s)
                expect(s["params_sha256"] == ref, "resumed from the rollback: params differ")
        with RunDir() as vm:
            remote = s3.overrides("rollback2", "checkpoint.keep_last=0")
            run(s3, vm, *remote)
            step15 = vm.file("checkpoints", "step-00000015")
            p = run(s3, vm, *remote, env={"DLRUN_FAULT": "abort_at_step:16"}, extra=("--resume", step15), check=None)
            expect(p.returncode not in (0, 2, 75), f"abort_at_step did not abort (exit {p.returncode})")
            expect(open(vm.file("checkpoints", "LATEST")).read() == "step-00000015\n", "local LATEST not rewritten")
            expect(not any(k.startswith("step-00000048/") for k in s3.keys("rollback2")), s3.keys("rollback2"))
            run(s3, vm, *remote)
            expect(vm.summary()["resumed_from_step"] == 15, vm.summary())
            expect(vm.summary()["params_sha256"] == ref, "resumed after the kill: params differ")


def test_retention_removes_what_nobody_reads():
    with S3Server() as s3:
        c = s3.client()
        # What a run killed during uploads leaves: a step without its manifest, and a multipart
        # upload that was started and never completed (its parts are billed).
        s3.write("tidy/step-00000001/model.pt", b"x" * 100)
        c.create_multipart_upload(Bucket=s3.bucket, Key="tidy/step-00000002/model.pt")
        c.create_multipart_upload(Bucket=s3.bucket, Key="other/step-00000002/model.pt")  # not ours
        s3.write("tidy/notes.txt", b"a user's file")
        with RunDir() as r:
            run(s3, r, *s3.overrides("tidy"))
        keys = s3.keys("tidy")
        expect(not any(k.startswith("step-00000001/") for k in keys), keys)
        expect("notes.txt" in keys and "LATEST" in keys, keys)
        left = [u["Key"] for u in c.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", [])]
        expect(left == ["other/step-00000002/model.pt"], left)


def test_answers_that_are_not_s3s_are_refused():
    head = b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><Prefix>runs/exp/</Prefix>'
    tail = b"<IsTruncated>false</IsTruncated></ListBucketResult>"
    big = 64 * 2**20 - 4096  # under the 64 MiB cap on an answer: the parser reads it all
    cases = {
        "an entity-laden key of 64 MiB": (head + b"<Contents><Key>runs/exp/" + b"&amp;" * ((big - 200) // 5) +
                                          b"</Key><Size>1</Size></Contents>" + tail, "text longer than"),
        "64 MiB of elements": (head + b"<Contents/>" * ((big - 200) // 11) + tail, "elements"),
        "a truncated page without a token": (head + b"<IsTruncated>true</IsTruncated><NextContinuationToken/>"
                                             b"</ListBucketResult>", "NextContinuationToken is empty"),
        "a key shorter than the prefix": (head + b"<Contents><Key>r</Key><Size>1</Size></Contents>" + tail,
                                          "is not under the prefix"),
        "a document type with entities": (b'<!DOCTYPE x [<!ENTITY a "aaaa">]>' + head + tail, "document type"),
        "not XML": (b"<html><body>502 Bad Gateway", "well-formed"),
        "an answer over 64 MiB": (head + b" " * (65 * 2**20) + tail, "larger than"),
    }
    env = {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret"}
    with FixedAnswer() as ep:
        for what, (body, says) in cases.items():
            ep.body = body
            t0 = time.time()
            p = dlrun("ckpt", "list", "s3://hostile-bucket/runs/exp", "--remote-endpoint", ep.endpoint, env=env,
                      check=2, timeout=300)
            took = time.time() - t0
            expect("malformed" in p.stdout and says in p.stdout, (what, p.stdout[-800:]))
            expect("does not answer as S3 does" in p.stdout, (what, p.stdout[-800:]))
            print(f"  {what}: refused in {took:.2f} s", flush=True)

if __name__ == "__main__":
    main([test_a_requeue_waits_for_the_store_and_never_starts_over,
          test_a_prefix_whose_checkpoints_all_fail_is_not_started_over, test_latest_wins_over_an_abandoned_timeline,
          test_retention_removes_what_nobody_reads, test_answers_that_are_not_s3s_are_refused])
