"""Credentials as clouds hand them out (docs/checkpoints.md, "Credentials"), against a real S3
implementation on 127.0.0.1 (moto, signatures checked) and fake credential services on
127.0.0.1 (cred_server.py): a profile of the shared files, web identity through STS (EKS IRSA),
the container endpoint (ECS, EKS Pod Identity), the EC2 instance role through IMDSv2;
temporary credentials that expire during the run, refreshed ahead of expiry, and credentials
revoked early, fetched again on ExpiredToken; no credential in a log or the run directory; a run
whose checkpoints never reach the store is not a success. No real cloud address is contacted."""
import os
import tempfile
import time

from common import RunDir, dlrun, expect, main
from cred_server import CredentialServer
from s3_server import S3Server
from test_remote import events, run, started, training, wait_for

NO_KEYS = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_SESSION_TOKEN": None}


def no_secret_anywhere(r, out, secrets):
    for secret in secrets:
        expect(secret not in out, "a credential in the log")
    for root, _, files in os.walk(r.path):
        for f in files:
            data = open(os.path.join(root, f), "rb").read()
            for secret in secrets:
                expect(secret.encode() not in data, f"a credential in {f}")


def test_a_profile_from_the_shared_files():
    with S3Server() as s3, tempfile.TemporaryDirectory() as d:
        creds, conf = os.path.join(d, "credentials"), os.path.join(d, "config")
        open(creds, "w").write(f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
                               f"[ckpt]\naws_access_key_id = {s3.key_id}\naws_secret_access_key = {s3.secret}\n")
        open(conf, "w").write("[profile ckpt]\nregion = us-east-1\ns3 =\n  addressing_style = path\n"
                              "[profile sso]\nsso_session = corp\n")
        files = dict(NO_KEYS, AWS_SHARED_CREDENTIALS_FILE=creds, AWS_CONFIG_FILE=conf, AWS_REGION=None)
        with RunDir() as r:
            p = run(s3, r, *s3.overrides("profile"), env=dict(files, AWS_PROFILE="ckpt"))
            expect(r.summary()["remote"]["uploads"] >= 1, r.summary()["remote"])
            expect("profile ckpt" in r.summary()["remote"]["credentials"], r.summary()["remote"])
            no_secret_anywhere(r, p.stdout, [s3.secret])
        with RunDir() as r:
            p = run(s3, r, *s3.overrides("profile"), env=dict(files, AWS_PROFILE="nope"), check=2)
            expect("AWS_PROFILE=nope: no such profile" in p.stdout, p.stdout[-1000:])
            p = run(s3, r, *s3.overrides("profile"), env=dict(files, AWS_PROFILE="sso"), check=2)
            expect("sso_session is a kind of profile dlrun does not resolve" in p.stdout, p.stdout[-1000:])
            p = run(s3, r, *s3.overrides("profile"), env=dict(files, AWS_PROFILE=None), check=2)  # [default]: wrong keys
            expect("HTTP 403" in p.stdout and "profile default" in p.stdout, p.stdout[-1000:])
            p = run(s3, r, *s3.overrides("profile"), env=dict(NO_KEYS, AWS_ACCESS_KEY_ID="AKIDONLY"), check=2)
            expect("sets AWS_ACCESS_KEY_ID but not AWS_SECRET_ACCESS_KEY" in p.stdout, p.stdout[-1000:])
            p = run(s3, r, *s3.overrides("profile"), env=dict(files, AWS_PROFILE=None, AWS_SHARED_CREDENTIALS_FILE=None,
                                                                AWS_CONFIG_FILE=None, HOME=d), check=2)
            expect("no AWS credentials" in p.stdout and "AWS_EC2_METADATA_DISABLED" in p.stdout, p.stdout[-1000:])
            expect(not os.listdir(r.path), "a refused start wrote into the run directory")


def test_web_identity_container_and_instance_role():
    with S3Server() as s3, CredentialServer(s3) as cs:
        for kind, env in (("sts", cs.sts_env), ("container", cs.container_env), ("imds", cs.imds_env)):
            with RunDir() as r:
                p = run(s3, r, *s3.overrides(f"creds-{kind}"), env=env)
                rem = r.summary()["remote"]
                expect(rem["uploads"] >= 1 and rem["failed_attempts"] == 0, (kind, rem))
                expect(cs.handed_out[kind] >= 1, (kind, cs.handed_out))
                no_secret_anywhere(r, p.stdout, cs.secrets)
        expect(s3.gate.refused == 0, f"{s3.gate.refused} requests with expired credentials")


def test_credentials_that_expire_during_the_run():
    """Credentials that live 4 s, during a run of at least 13 s (a slow loader) that saves every 4
    steps: each is fetched again ahead of its expiry, and every upload lands."""
    with S3Server() as s3, CredentialServer(s3, lifetime_s=4) as cs, RunDir() as r:
        p = run(s3, r, *s3.overrides("expiring", "train.epochs=8", "checkpoint.every_steps=4"),
                env=dict(cs.container_env, DLRUN_FAULT="slow_batch:100"))
        rem = r.summary()["remote"]
        expect(rem["uploads"] >= 3 and rem["failed_attempts"] == 0 and rem["given_up"] == 0, rem)
        expect(cs.handed_out["container"] >= 3, cs.handed_out)
        no_secret_anywhere(r, p.stdout, cs.secrets)


def test_credentials_revoked_early_are_fetched_again():
    """The service refuses the credentials (ExpiredToken) long before the Expiration they were
    handed out with: only fetching them again on that answer gets past it."""
    with S3Server() as s3, CredentialServer(s3, lifetime_s=2, announced_s=3600) as cs, RunDir() as r:
        p = run(s3, r, *s3.overrides("revoked", "train.epochs=6", "checkpoint.every_steps=8"),
                env=dict(cs.imds_env, DLRUN_FAULT="slow_batch:100"))
        rem = r.summary()["remote"]
        expect(rem["uploads"] >= 2 and rem["failed_attempts"] == 0 and rem["given_up"] == 0, rem)
        expect(s3.gate.refused >= 1 and cs.handed_out["imds"] >= 2, (s3.gate.refused, cs.handed_out))
        no_secret_anywhere(r, p.stdout, cs.secrets)


def test_a_run_whose_checkpoints_never_reach_the_store_is_not_a_success():
    with S3Server() as s3:
        with RunDir() as r:  # a key that can look, not write: refused at start, nothing trained in vain
            s3.restrict(["s3:ListBucket", "s3:GetObject", "s3:ListBucketMultipartUploads", "s3:DeleteObject"])
            p = run(s3, r, *s3.overrides("readonly"), check=2)
            expect("this request needs s3:PutObject" in p.stdout and "HTTP 403" in p.stdout, p.stdout[-1500:])
            expect(not os.listdir(r.path), "a refused start wrote into the run directory")
        s3.restrict(["s3:*"])
        with RunDir() as r:  # the permission taken away once the run has started
            # A first save at step 20, a second of training after the start: the permission is gone by then.
            with training(s3, r, *s3.overrides("readonly", "checkpoint.every_steps=20"),
                          env={"DLRUN_FAULT": "slow_batch:50"}) as p:
                wait_for(started(r), p)
                s3.restrict(["s3:ListBucket", "s3:GetObject"])
                out, _ = p.communicate(timeout=300)
            expect(p.returncode == 1, f"exit {p.returncode}\n{out[-1500:]}")
            expect(("uploads in a row failed for good" in out or "did not reach" in out) and "HTTP 403" in out,
                   out[-1500:])
            expect("no checkpoint of this run is in" in out, out[-1500:])
            s = r.summary()
            expect(s["status"] == "failed" and s["remote"]["uploads"] == 0 and s["remote"]["given_up"] >= 1, s)
            expect(os.path.isdir(r.file("checkpoints", "step-00000048")), "the local checkpoints are gone")


def test_uploads_that_fail_for_good_stop_the_run_and_ckpt_push_catches_up():
    """Environment keys from `aws sts assume-role` expire during a long run (the store answers
    ExpiredToken; dlrun cannot refresh fixed keys). Before, every upload failed for good and the
    run ended with exit 0, "completed", the bucket hundreds of steps behind. Now
    checkpoint.max_failed_saves uploads given up in a row stop the run as failed saves do (exit
    1), naming the newest remote checkpoint and what to do; a run that finishes with its final
    checkpoint not in the store exits 1 too (max_failed_saves: 0); and `dlrun ckpt push RUN_DIR`
    uploads the local checkpoints the store lacks once the keys work again."""
    with S3Server() as s3:
        gate = s3._gate()  # (the endpoint is the gate from here on: it answers ExpiredToken when told to)
        for limit in (2, 0):
            with RunDir() as r:
                prefix = f"behind{limit}"
                with training(s3, r, *s3.overrides(prefix, "train.epochs=20", "checkpoint.every_steps=4",
                                                   f"checkpoint.max_failed_saves={limit}"),
                              env={"DLRUN_FAULT": "slow_batch:40"}) as p:
                    wait_for(lambda: events(r, "upload"), p)  # one checkpoint reached the store
                    gate.expiry[s3.key_id] = time.time() - 1  # the keys expire now
                    out, _ = p.communicate(timeout=300)
                gate.expiry.pop(s3.key_id)
                expect(p.returncode == 1, f"max_failed_saves={limit}: exit {p.returncode}\n{out[-2000:]}")
                uploaded = max(e["step"] for e in events(r, "upload"))
                newest = f"the newest checkpoint in {s3.url(prefix)} is step {uploaded}"
                if limit:
                    expect(f"{limit} checkpoint uploads in a row failed for good (checkpoint.max_failed_saves)" in out,
                           out[-2000:])
                    expect(r.summary()["status"] == "failed", r.summary().get("status"))
                else:
                    expect("training finished at step" in out and "but its final checkpoint did not reach" in out,
                           out[-2000:])
                expect(newest in out and "ExpiredToken" in out, out[-2000:])
                expect("dlrun ckpt push RUN_DIR" in out and "fixed keys dlrun cannot refresh" in out, out[-2000:])
                local = sorted(n for n in os.listdir(r.file("checkpoints")) if n.startswith("step-"))
                expect(int(local[-1][5:]) > uploaded, (local, uploaded))
                # The keys work again: push what the store lacks; LATEST names the newest local one.
                p = dlrun("ckpt", "push", r.path, env=s3.env, check=0)
                expect(f"now names {local[-1]} (LATEST)" in p.stdout and "uploading" in p.stdout, p.stdout)
                expect(s3.read(f"{prefix}/LATEST").decode().strip() == local[-1], s3.keys(prefix))
                listing = dlrun("ckpt", "list", s3.url(prefix), "--remote-endpoint", s3.endpoint, env=s3.env, check=0)
                expect(f"(LATEST: {local[-1]})" in listing.stdout, listing.stdout)
                again = dlrun("ckpt", "push", r.path, env=s3.env, check=0)
                expect("nothing to push" in again.stdout, again.stdout)
        expect(gate.refused >= 2, gate.refused)


if __name__ == "__main__":
    main([test_a_profile_from_the_shared_files, test_web_identity_container_and_instance_role,
          test_credentials_that_expire_during_the_run, test_credentials_revoked_early_are_fetched_again,
          test_a_run_whose_checkpoints_never_reach_the_store_is_not_a_success,
          test_uploads_that_fail_for_good_stop_the_run_and_ckpt_push_catches_up])
