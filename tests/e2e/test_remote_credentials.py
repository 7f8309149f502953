"""Credentials as clouds hand them out (docs/checkpoints.md, "Credentials"), against a real S3
implementation on 127.0.0.1 (moto, signatures checked) and fake credential services on
127.0.0.1 (cred_server.py): a profile of the shared files, web identity through STS (EKS IRSA),
the container endpoint (ECS, EKS Pod Identity), the EC2 instance role through IMDSv2;
temporary credentials that expire during the run, refreshed ahead of expiry, and credentials
revoked early, fetched again on ExpiredToken; no credential in a log or the run directory; a run
whose checkpoints never reach the store is not a success. No real cloud address is contacted."""
import os
import tempfile

from common import RunDir, expect, main
from cred_server import CredentialServer
from s3_server import S3Server
from test_remote import run, started, training, wait_for

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
            expect("none of this run's checkpoints reached" in out and "HTTP 403" in out, out[-1500:])
            s = r.summary()
            expect(s["status"] == "failed" and s["remote"]["uploads"] == 0 and s["remote"]["given_up"] >= 1, s)
            expect(os.path.isdir(r.file("checkpoints", "step-00000048")), "the local checkpoints are gone")


if __name__ == "__main__":
    main([test_a_profile_from_the_shared_files, test_web_identity_container_and_instance_role,
          test_credentials_that_expire_during_the_run, test_credentials_revoked_early_are_fetched_again,
          test_a_run_whose_checkpoints_never_reach_the_store_is_not_a_success])
