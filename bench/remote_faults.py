#!/usr/bin/env python3
"""Remote checkpoints under the faults a Spot VM meets (docs/checkpoints.md, "Measured"), against
moto's S3 server on 127.0.0.1 (tests/e2e/s3_server.py) and fake credential services
(tests/e2e/cred_server.py). Three measurements:

  requeue    a run stopped at step 12 (uploaded); a requeue onto an empty run directory while
             the store is down for --down-s seconds, then back: the step it resumes at, how long
             it waited, and whether it ends at the uninterrupted run's params_sha256
  expiring   a run of --minutes minutes (a slow loader stretches tests/e2e/data/tiny.yaml) that
             saves every --every-s seconds, with temporary credentials from the container
             endpoint that expire every --lifetime-s seconds: uploads that landed, failed
             attempts, credentials fetched, requests refused as expired
  hostile    `dlrun ckpt list` against an endpoint whose listing is 64 MiB of hostile XML (three
             kinds): how long until it is refused

    bench/remote_faults.py --dlrun build/dlrun [--only requeue,expiring,hostile]
        [--down-s 30] [--minutes 10] [--every-s 20] [--lifetime-s 60]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from cred_server import CredentialServer  # noqa: E402
from s3_server import FixedAnswer, S3Server  # noqa: E402

TINY = os.path.join(ROOT, "tests", "e2e", "data", "tiny.yaml")


def env_with(extra):
    e = dict(os.environ, AWS_EC2_METADATA_DISABLED="true", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
             AWS_CONFIG_FILE="/nonexistent")
    e.pop("DLRUN_FAULT", None)
    for k, v in extra.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def train(dlrun, run_dir, overrides, env, check=None):
    p = subprocess.run([dlrun, "train", TINY, "--run-dir", run_dir, "log.progress=none", *overrides],
                       env=env_with(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check is not None and p.returncode != check:
        sys.exit(f"dlrun train exited {p.returncode}, expected {check}:\n{p.stdout[-3000:]}")
    return p


def summary(run_dir):
    return json.load(open(os.path.join(run_dir, "summary.json")))


def requeue(a):
    with tempfile.TemporaryDirectory() as d:
        ref = os.path.join(d, "ref")
        train(a.dlrun, ref, [], {}, check=0)
        want = summary(ref)["params_sha256"]
        with S3Server() as s3:
            remote = s3.overrides("requeue")
            train(a.dlrun, os.path.join(d, "first"), remote, dict(s3.env, DLRUN_FAULT="signal_at_step:12"), check=75)
            s3.down()
            threading.Timer(a.down_s, s3.up).start()
            t0 = time.time()
            p = train(a.dlrun, os.path.join(d, "fresh"), remote, s3.env, check=0)
            took = time.time() - t0
            s = summary(os.path.join(d, "fresh"))
            retries = sum("retry" in line and "checkpoint.remote_wait_s left" in line for line in p.stdout.splitlines())
            print(f"requeue onto an empty run directory, store down {a.down_s:.0f} s then back: exit {p.returncode}, "
                  f"resumed at step {s['resumed_from_step']} after {retries} retries, whole run {took:.1f} s, "
                  f"params_sha256 {'equal to' if s['params_sha256'] == want else 'DIFFERENT from'} the uninterrupted "
                  f"run's", flush=True)


def expiring(a):
    steps_per_epoch = 16
    # a slow loader: one batch every 100 ms, so the run lasts --minutes whatever the machine
    epochs = max(1, int(a.minutes * 60 / 0.1 / steps_per_epoch))
    with tempfile.TemporaryDirectory() as d, S3Server() as s3, CredentialServer(s3, lifetime_s=a.lifetime_s) as cs:
        run_dir = os.path.join(d, "run")
        t0 = time.time()
        p = train(a.dlrun, run_dir, s3.overrides("expiring", f"train.epochs={epochs}", "checkpoint.every_steps=0",
                                                f"checkpoint.every_minutes={a.every_s / 60}"),
                  dict(cs.container_env, DLRUN_FAULT="slow_batch:100"), check=0)
        took = time.time() - t0
        rem = summary(run_dir)["remote"]
        saves = sum(1 for line in open(os.path.join(run_dir, "metrics.jsonl")) if '"event": "checkpoint"' in line
                    or '"event":"checkpoint"' in line)
        leaked = [x for x in cs.secrets if x in p.stdout]
        print(f"{took / 60:.1f} min run, a save every {a.every_s:.0f} s, credentials living {a.lifetime_s:.0f} s: "
              f"{saves} saves, {rem['uploads']} uploads landed, {rem['failed_attempts']} failed attempts, "
              f"{rem['given_up']} given up; {cs.handed_out['container']} credentials fetched, "
              f"{s3.gate.refused} requests refused as expired; secrets in the log: {len(leaked)}", flush=True)


def hostile(a):
    head = b"<ListBucketResult><Prefix>runs/exp/</Prefix>"
    tail = b"<IsTruncated>false</IsTruncated></ListBucketResult>"
    size = 64 * 2**20 - 4096
    bodies = {
        "a well-formed listing of nothing (the baseline: process start, LibTorch, one request)": head + tail,
        "one key of 64 MiB of &amp; entities": head + b"<Contents><Key>runs/exp/" + b"&amp;" * ((size - 200) // 5) +
        b"</Key><Size>1</Size></Contents>" + tail,
        "64 MiB of empty <Contents/> elements": head + b"<Contents/>" * ((size - 200) // 11) + tail,
        "64 MiB of nested elements": head + b"<a>" * ((size - 200) // 3) + tail,
    }
    env = env_with({"AWS_ACCESS_KEY_ID": "AKIDBENCH", "AWS_SECRET_ACCESS_KEY": "secret"})
    with FixedAnswer() as ep:
        for what, body in bodies.items():
            ep.body = body
            t0 = time.perf_counter()
            subprocess.run(["curl", "-s", "-o", "/dev/null", ep.endpoint + "/hostile-bucket?list-type=2"], check=True)
            print(f"  ({len(body) / 2**20:.1f} MiB through curl alone: {time.perf_counter() - t0:.2f} s)")
            for _ in range(3):
                t0 = time.perf_counter()
                p = subprocess.run([a.dlrun, "ckpt", "list", "s3://hostile-bucket/runs/exp", "--remote-endpoint",
                                    ep.endpoint], env=env, capture_output=True, text=True)
                took = time.perf_counter() - t0
                why = next((line for line in p.stderr.splitlines() if "malformed" in line), p.stdout.strip()[-100:])
                print(f"hostile listing, {what}: exit {p.returncode} after {took:.2f} s "
                      f"(process start and the transfer included): {why[-150:]}", flush=True)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", required=True)
    ap.add_argument("--only", default="requeue,expiring,hostile")
    ap.add_argument("--down-s", type=float, default=30)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--every-s", type=float, default=20)
    ap.add_argument("--lifetime-s", type=float, default=60)
    a = ap.parse_args()
    for name in a.only.split(","):
        {"requeue": requeue, "expiring": expiring, "hostile": hostile}[name](a)


if __name__ == "__main__":
    main()
