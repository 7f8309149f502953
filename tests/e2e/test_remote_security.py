"""Checkpoints and data in object storage as a security review expects (docs/security.md):
TLS verified against the CAs named (a TLS terminator on 127.0.0.1 with certificates made by
`openssl`: tls_proxy.py), an unknown CA, an expired certificate, another host's name and a
server below the TLS floor refused at start (exit 2) and never retried; plain http refused
unless to loopback; SSE-KMS on every object of a checkpoint (multipart parts included) and of
packed shards, recorded in the manifest and checked on the way back, satisfying a bucket
policy that denies unencrypted puts; the IAM policies of docs/security.md sufficient (train,
resume on a fresh directory, prune; pack and train on shards) and necessary (each S3 action
taken away: exit 2 at start naming it, nothing lost), against moto's S3, KMS and IAM; and no
secret in any file a refused or finished run wrote. One moto server for the file; nothing but
127.0.0.1 is contacted (the two non-loopback http endpoints are refused before any request)."""
import json
import os
import re
import resource
import shutil
import ssl
import subprocess
import tempfile
import time

from common import DLRUN, SRC, RunDir, cfg, dlrun, environment, expect, main, train
from s3_server import S3Server
from test_remote_credentials import no_secret_anywhere
from test_shards import Scratch, image_folder
from test_shards import config as shards_config
from tls_proxy import Pki, TlsProxy

TINY = cfg("tiny.yaml")
SHORT = ("train.max_steps=6", "checkpoint.every_steps=3")
S3 = None  # the file's one moto server (main below)


class Place:
    """A directory with a path, for no_secret_anywhere."""

    def __init__(self, path):
        self.path = path


def refused(args, env, secret):
    """`dlrun ARGS` must be refused (exit 2): returns its output. It runs where a core dump could
    be written (core files allowed, the working directory a fresh one); none may be, and neither
    the output nor any file it left (a run directory named in ARGS included) holds `secret`."""
    with Scratch() as cwd:
        def allow_core():
            resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

        t0 = time.time()
        p = subprocess.run([DLRUN, *args], env=environment(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=300, cwd=cwd.path, preexec_fn=allow_core)
        expect(p.returncode == 2, f"dlrun {' '.join(args)}: exit {p.returncode}, expected 2\n{p.stdout[-2500:]}")
        expect(time.time() - t0 < 60, f"a refusal took {time.time() - t0:.0f} s: retried?")
        expect(not re.search(r"retry \d+ in|retrying", p.stdout), f"a refusal was retried:\n{p.stdout[-2500:]}")
        expect(not [f for f in os.listdir(cwd.path) if f.startswith("core")], "a refused start dumped core")
        no_secret_anywhere(cwd, p.stdout, [secret])
        if "--run-dir" in args:
            run_dir = args[args.index("--run-dir") + 1]
            expect(not os.path.exists(run_dir) or not os.listdir(run_dir), "a refused start wrote into the run directory")
        return p.stdout


def first_error(out):
    """The first "dlrun: error: ..." line of a refused command."""
    return next((l for l in out.splitlines() if "error:" in l), "(no error line)")


def settled(cond, timeout=5):
    """`cond` holds now or within `timeout` seconds (a server thread counting what it saw)."""
    deadline = time.time() + timeout
    while not cond() and time.time() < deadline:
        time.sleep(0.05)
    return cond()


def train_args(r, *overrides):
    return ["train", TINY, "--run-dir", r.path, "log.progress=none", *overrides]


def remote(prefix, endpoint, *extra, bucket=None):
    return (f"checkpoint.remote=s3://{bucket or S3.bucket}/{prefix}", f"checkpoint.remote_endpoint={endpoint}", *extra)


# ---- encryption in transit ------------------------------------------------------------------

def test_tls_is_verified_against_the_cas_named_and_a_bad_certificate_is_a_refused_start():
    env = dict(S3.env)
    with tempfile.TemporaryDirectory() as d:
        ca, rogue = Pki(d, "ca"), Pki(d, "rogue")
        good = ca.issue("good", ["127.0.0.1"])
        with TlsProxy(good, S3.proxy.port) as t:
            # Verified against AWS_CA_BUNDLE (as the SDKs read it): it trains and uploads.
            with RunDir() as r:
                p = train(TINY, r.path, *remote("tls/ok", t.endpoint, *SHORT), env=dict(env, AWS_CA_BUNDLE=ca.pem))
                expect(r.summary()["remote"]["uploads"] >= 1, r.summary()["remote"])
                expect("plain http" not in p.stdout, p.stdout[-1500:])
                # ... and against checkpoint.remote_ca_bundle, resuming the same run.
                train(TINY, r.path, *remote("tls/ok", t.endpoint, "train.max_steps=9", "checkpoint.every_steps=3",
                                            f"checkpoint.remote_ca_bundle={ca.pem}"), env=env)
            p = dlrun("ckpt", "list", S3.url("tls/ok"), "--remote-endpoint", t.endpoint, "--remote-ca-bundle", ca.pem,
                      env=env, check=0)
            expect("step-00000009" in p.stdout, p.stdout)
            # The system's store does not hold our CA; nor does a bundle of another CA. `config validate`
            # makes train's start check of the store and refuses with the same first error.
            for extra in ({}, {"AWS_CA_BUNDLE": rogue.pem}):
                before = t.connections()
                with RunDir() as r:
                    out = refused(train_args(r, *remote("tls/ok", t.endpoint)), dict(env, **extra), S3.secret)
                expect(f"TLS refused the service at {t.endpoint}: SSL certificate problem: unable to get local issuer "
                       "certificate" in out and "AWS_CA_BUNDLE" in out, out[-1500:])
                expect(settled(lambda: t.connections() - before == 1),
                       f"{t.connections() - before} connections for one refused start")
                checked = refused(["config", "validate", TINY, *remote("tls/ok", t.endpoint)], dict(env, **extra),
                                  S3.secret)
                expect(first_error(checked) == first_error(out), (first_error(checked), first_error(out)))
        # A bucket that does not exist: refused by train and by validate, the same first error.
        with RunDir() as r:
            out = refused(train_args(r, *remote("x", S3.endpoint, bucket="no-such-bucket")), env, S3.secret)
        checked = refused(["config", "validate", TINY, *remote("x", S3.endpoint, bucket="no-such-bucket")], env,
                          S3.secret)
        expect("no-such-bucket" in out and first_error(checked) == first_error(out), (checked[-800:], out[-800:]))
        # An expired certificate, one for another host, one from a CA nobody named.
        for cert, reason in ((ca.issue("old", ["127.0.0.1"], expired=True), "certificate has expired"),
                             (ca.issue("elsewhere", ["s3.example.com"]), "no alternative certificate subject name "
                                                                          "matches target host name '127.0.0.1'"),
                             (rogue.issue("rogue", ["127.0.0.1"]), "unable to get local issuer certificate")):
            with TlsProxy(cert, S3.proxy.port) as t, RunDir() as r:
                out = refused(train_args(r, *remote("tls/bad", t.endpoint)), dict(env, AWS_CA_BUNDLE=ca.pem), S3.secret)
                expect(f"bucket {S3.bucket}" in out and f"TLS refused the service at {t.endpoint}" in out and reason in out,
                       out[-1500:])
                out = refused(["ckpt", "list", S3.url("tls/bad"), "--remote-endpoint", t.endpoint], dict(env, AWS_CA_BUNDLE=ca.pem),
                              S3.secret)
                expect(reason in out, out[-1500:])
                expect(settled(lambda: t.connections() == 2), f"{t.connections()} connections for two refused commands")


def test_a_store_below_the_tls_floor_is_refused():
    with tempfile.TemporaryDirectory() as d:
        ca = Pki(d, "ca")
        env = dict(S3.env, AWS_CA_BUNDLE=ca.pem)
        with TlsProxy(ca.issue("good", ["127.0.0.1"]), S3.proxy.port, max_version=ssl.TLSVersion.TLSv1_2) as t:
            dlrun("ckpt", "list", S3.url("floor"), "--remote-endpoint", t.endpoint, env=env, check=0)  # 1.2: the default
            out = refused(["ckpt", "list", S3.url("floor"), "--remote-endpoint", t.endpoint, "--remote-tls-min", "1.3"],
                          env, S3.secret)
            expect("alert protocol version (this client accepts TLS 1.3 and later)" in out, out[-1500:])
            with RunDir() as r:
                out = refused(train_args(r, *remote("floor", t.endpoint, "checkpoint.remote_tls_min=1.3")), env, S3.secret)
            expect(f"TLS refused the service at {t.endpoint}" in out and "remote_tls_min" in out, out[-1500:])
        # A store that speaks TLS 1.3 meets the 1.3 floor: a run trains and uploads through it.
        with TlsProxy(ca.issue("new", ["127.0.0.1"]), S3.proxy.port) as t:
            dlrun("ckpt", "list", S3.url("floor"), "--remote-endpoint", t.endpoint, "--remote-tls-min", "1.3", env=env,
                  check=0)
            with RunDir() as r:
                train(TINY, r.path, *remote("floor13", t.endpoint, *SHORT, "checkpoint.remote_tls_min=1.3"), env=env)
                expect(r.summary()["remote"]["uploads"] >= 1, r.summary()["remote"])


def test_plain_http_is_refused_unless_to_loopback_or_accepted_by_name():
    # Refused before any request is made: these addresses are never contacted.
    with RunDir() as r:
        out = refused(train_args(r, *remote("http", "http://192.0.2.10:9000")), S3.env, S3.secret)
        expect("checkpoint.remote_endpoint: http://192.0.2.10:9000 is plain http to another host" in out and
               "checkpoint.remote_allow_unencrypted_http: true" in out, out[-1500:])
        out = refused(train_args(r, "checkpoint.remote=s3://b-ucket/x"), dict(S3.env, AWS_ENDPOINT_URL="http://192.0.2.10:9000"),
                      S3.secret)
        expect("AWS_ENDPOINT_URL: http://192.0.2.10:9000 is plain http to another host" in out, out[-1500:])
    out = refused(["ckpt", "list", "s3://b-ucket/x", "--remote-endpoint", "http://192.0.2.10:9000"], S3.env, S3.secret)
    expect("is plain http to another host" in out and "--remote-allow-unencrypted-http" in out, out[-1500:])
    # Loopback is this machine: accepted, and the log says the traffic is not encrypted.
    p = dlrun("ckpt", "list", S3.url("http"), "--remote-endpoint", S3.endpoint, env=S3.env, check=0)
    expect(f"S3 at {S3.endpoint}: plain http, unencrypted (a loopback address" in p.stdout, p.stdout)


def test_shards_and_pack_take_the_same_tls_and_plain_http_rules():
    with tempfile.TemporaryDirectory() as d, Scratch() as s:
        ca, rogue = Pki(d, "ca"), Pki(d, "rogue")
        image_folder(s.file("folder"), per_class=3)
        pack = ["data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--to", S3.url("tls-shards"),
                "--samples-per-shard", "6"]
        shards = shards_config(s.file("c.yaml"), S3.url("tls-shards"), s.file("cache"))
        with TlsProxy(ca.issue("good", ["127.0.0.1"]), S3.proxy.port) as t:
            # `data pack` verifies the store as checkpoints do: not against the system's CAs, yes against ours.
            out = refused([*pack, "--remote-endpoint", t.endpoint], S3.env, S3.secret)
            expect(f"TLS refused the service at {t.endpoint}: SSL certificate problem: unable to get local issuer "
                   "certificate" in out, out[-1500:])
            dlrun(*pack, "--remote-endpoint", t.endpoint, "--remote-ca-bundle", ca.pem, env=S3.env, check=0)
            # data.shards: the environment's endpoint and AWS_CA_BUNDLE.
            env = dict(S3.env, AWS_ENDPOINT_URL=t.endpoint)
            with RunDir() as r:
                train(shards, r.path, "train.max_steps=2", env=dict(env, AWS_CA_BUNDLE=ca.pem))
            shutil.rmtree(s.file("cache"), ignore_errors=True)
            before = t.connections()
            with RunDir() as r:
                out = refused(["train", shards, "--run-dir", r.path, "train.max_steps=2"], dict(env, AWS_CA_BUNDLE=rogue.pem),
                              S3.secret)
            expect(f"TLS refused the service at {t.endpoint}: SSL certificate problem: unable to get local issuer "
                   "certificate" in out, out[-1500:])
            expect(settled(lambda: t.connections() - before == 1), f"{t.connections() - before} connections for one refusal")
        # Plain http to another host: refused before any request, naming the data's own key.
        with RunDir() as r:
            out = refused(["train", shards, "--run-dir", r.path], dict(S3.env, AWS_ENDPOINT_URL="http://192.0.2.10:9000"),
                          S3.secret)
        expect("AWS_ENDPOINT_URL: http://192.0.2.10:9000 is plain http to another host" in out and
               "data.allow_unencrypted_http" in out, out[-1500:])
        out = refused([*pack, "--remote-endpoint", "http://192.0.2.10:9000"], S3.env, S3.secret)
        expect("is plain http to another host" in out and "--remote-allow-unencrypted-http" in out, out[-1500:])


# ---- encryption at rest ---------------------------------------------------------------------

SSE_BUCKET = "dlrun-sse"


def deny_unencrypted(bucket):
    """AWS's bucket policy that refuses object writes without SSE-KMS."""
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "DenyIncorrectEncryptionHeader", "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
         "Resource": f"arn:aws:s3:::{bucket}/*",
         "Condition": {"StringNotEquals": {"s3:x-amz-server-side-encryption": "aws:kms"}}},
        {"Sid": "DenyUnEncryptedObjectUploads", "Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
         "Resource": f"arn:aws:s3:::{bucket}/*", "Condition": {"Null": {"s3:x-amz-server-side-encryption": "true"}}}]}


def head_all(bucket, prefix):
    s3 = S3.client()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])]
    return {k: s3.head_object(Bucket=bucket, Key=k) for k in keys}


def test_sse_kms_on_every_object_satisfies_a_bucket_policy_and_is_checked_on_the_way_back():
    S3.create_bucket(SSE_BUCKET)
    S3.enforce_bucket_policy(SSE_BUCKET, deny_unencrypted(SSE_BUCKET))
    key_id, _ = S3.kms_key()
    sse = ("checkpoint.remote_sse=aws:kms", f"checkpoint.remote_sse_kms_key_id={key_id}", "checkpoint.remote_sse_bucket_key=true")
    # A 6.4 MB first layer: model.pt goes up in two parts of 5 MiB.
    big = ("model.name=mlp", "model.hidden=[2048]", "data.synthetic_shape=[1,28,28]", "train.max_steps=4", "checkpoint.every_steps=2",
           "checkpoint.remote_part_mb=5")
    with RunDir() as r:  # without the encryption the bucket demands: refused at start by the probe
        out = refused(train_args(r, *remote("ckpt", S3.endpoint, *big, bucket=SSE_BUCKET)), S3.env, S3.secret)
        expect("HTTP 403 AccessDenied" in out and "this request needs s3:PutObject" in out and "checkpoint.remote_sse" in out,
               out[-1500:])
    denied = S3.gate.denied
    with RunDir() as r:
        p = train(TINY, r.path, *remote("ckpt", S3.endpoint, *big, *sse, bucket=SSE_BUCKET), env=S3.env)
        expect(f"S3 at {S3.endpoint}: plain http, unencrypted (a loopback address" in p.stdout, p.stdout[-1500:])
        no_secret_anywhere(r, p.stdout, [S3.secret])
    expect(S3.gate.denied == denied, f"{S3.gate.denied - denied} writes refused by the bucket policy")
    heads = head_all(SSE_BUCKET, "ckpt")
    expect(len(heads) >= 7 and "ckpt/step-00000004/model.pt" in heads, sorted(heads))
    for k, h in heads.items():
        expect(h.get("ServerSideEncryption") == "aws:kms" and h.get("SSEKMSKeyId") == key_id, (k, h))
    expect(heads["ckpt/step-00000004/model.pt"]["ETag"].strip('"').endswith("-2"), "model.pt was not a multipart upload")
    manifest = json.loads(S3.client().get_object(Bucket=SSE_BUCKET, Key="ckpt/step-00000004/manifest.json")["Body"].read())
    expect(manifest["server_side_encryption"] == {"algorithm": "aws:kms", "kms_key_id": key_id, "bucket_key": True},
           manifest.get("server_side_encryption"))
    url = f"s3://{SSE_BUCKET}/ckpt/step-00000004"
    dlrun("ckpt", "verify", url, "--remote-endpoint", S3.endpoint, env=S3.env, check=0)
    # An object replaced by one stored without encryption (same bytes) is not this checkpoint's.
    admin = S3.client()
    data = admin.get_object(Bucket=SSE_BUCKET, Key="ckpt/step-00000004/state.json")["Body"].read()
    S3.client().put_object(Bucket=SSE_BUCKET, Key="ckpt/step-00000004/state.json", Body=data)  # no SSE headers
    p = dlrun("ckpt", "verify", url, "--remote-endpoint", S3.endpoint, env=S3.env, check=2)
    expect("state.json: stored with server-side encryption none; manifest.json records aws:kms" in p.stdout, p.stdout)

    # Shards written by `dlrun data pack` take the same settings.
    with Scratch() as s:
        image_folder(s.file("folder"), per_class=3)
        pack = ["data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--samples-per-shard", "4",
                "--remote-endpoint", S3.endpoint]
        out = refused(pack + ["--to", f"s3://{SSE_BUCKET}/shards"], S3.env, S3.secret)
        expect("this request needs s3:PutObject" in out, out[-1500:])
        dlrun(*pack, "--to", f"s3://{SSE_BUCKET}/shards", "--remote-sse", "aws:kms", "--remote-sse-kms-key-id", key_id,
              env=S3.env, check=0)
    heads = head_all(SSE_BUCKET, "shards")
    expect("shards/shardindex.json" in heads and "shards/train-000002.tar" in heads, sorted(heads))
    for k, h in heads.items():
        expect(h.get("ServerSideEncryption") == "aws:kms" and h.get("SSEKMSKeyId") == key_id, (k, h))


def test_sse_s3_on_every_object_of_a_checkpoint():
    with RunDir() as r:
        train(TINY, r.path, *remote("aes", S3.endpoint, *SHORT, "checkpoint.remote_sse=AES256"), env=S3.env)
    heads = head_all(S3.bucket, "aes")
    expect(len(heads) >= 7 and "aes/step-00000006/manifest.json" in heads, sorted(heads))
    for k, h in heads.items():
        expect(h.get("ServerSideEncryption") == "AES256" and "SSEKMSKeyId" not in h, (k, h))
    manifest = json.loads(S3.client().get_object(Bucket=S3.bucket, Key="aes/step-00000006/manifest.json")["Body"].read())
    expect(manifest["server_side_encryption"]["algorithm"] == "AES256", manifest.get("server_side_encryption"))
    dlrun("ckpt", "verify", S3.url("aes/step-00000006"), "--remote-endpoint", S3.endpoint, env=S3.env, check=0)


# ---- least privilege ------------------------------------------------------------------------

def documented_policy(name, bucket, prefix, key_arn):
    """The IAM policy docs/security.md gives (`<!-- iam-policy: NAME -->`), for this bucket, prefix
    and key -- without its Condition blocks: moto's evaluator ignores S3's condition keys, so what
    they would do cannot be tested here; the resource ARNs are (docs/security.md, "Known gaps")."""
    text = open(os.path.join(SRC, "docs", "security.md")).read()
    m = re.search(r"<!-- iam-policy: " + name + r" -->\s*```json\n(.*?)```", text, re.S)
    expect(m, f"no policy {name} in docs/security.md")
    doc = json.loads(m.group(1).replace("BUCKET", bucket).replace("PREFIX", prefix).replace("KMS_KEY_ARN", key_arn))
    for st in doc["Statement"]:
        st.pop("Condition", None)
    return doc


def without(policy, action):
    """`policy` with `action` taken out of every statement (a statement left with none dropped)."""
    out = json.loads(json.dumps(policy))
    kept = []
    for st in out["Statement"]:
        actions = [a for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"]) if a != action]
        if actions:
            st["Action"] = actions
            kept.append(st)
    out["Statement"] = kept
    return out


def s3_actions(policy):
    return [a for st in policy["Statement"] for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
            if a.startswith("s3:")]


def bucket_state(prefix):
    """Every object under `prefix` with its ETag: 'nothing lost, nothing added'."""
    page = S3.client().list_objects_v2(Bucket=S3.bucket, Prefix=prefix + "/")
    return {o["Key"]: o["ETag"] for o in page.get("Contents", [])}


def complete_steps(prefix):
    return sorted(k.split("/")[1] for k in bucket_state(prefix) if k.endswith("/manifest.json"))


def test_the_documented_checkpoint_policy_is_sufficient_and_each_action_necessary():
    key_id, key_arn = S3.kms_key()
    policy = documented_policy("checkpoints", S3.bucket, "lp", key_arn)
    env = S3.user("least", policy)
    sse = ("checkpoint.remote_sse=aws:kms", f"checkpoint.remote_sse_kms_key_id={key_id}", "checkpoint.keep_last=1",
           "checkpoint.every_steps=3")
    with RunDir() as r:  # it trains, uploads, and retention prunes the older checkpoints
        p = train(TINY, r.path, *remote("lp", S3.endpoint, "train.max_steps=9", *sse), env=env)
        no_secret_anywhere(r, p.stdout, [env["AWS_SECRET_ACCESS_KEY"]])
    expect(complete_steps("lp") == ["step-00000009"], complete_steps("lp"))
    with RunDir() as r:  # a fresh VM resumes from the bucket, trains on, prunes again
        p = train(TINY, r.path, *remote("lp", S3.endpoint, "train.max_steps=15", *sse), env=env)
        expect(f"downloading s3://{S3.bucket}/lp/step-00000009" in p.stdout, p.stdout[-2000:])
        expect(r.summary()["steps"] == 15, r.summary())
        no_secret_anywhere(r, p.stdout, [env["AWS_SECRET_ACCESS_KEY"]])
    expect(complete_steps("lp") == ["step-00000015"], complete_steps("lp"))
    # Each S3 action taken away: the start is refused naming it; nothing in the bucket changes.
    actions = s3_actions(policy)
    expect(len(actions) == 6, actions)
    for action in actions:
        S3.user("least", without(policy, action))
        before = bucket_state("lp")
        with RunDir() as r:
            out = refused(train_args(r, *remote("lp", S3.endpoint, "train.max_steps=18", *sse)), env,
                          env["AWS_SECRET_ACCESS_KEY"])
        expect("HTTP 403 AccessDenied" in out and f"this request needs {action} on arn:aws:s3:::{S3.bucket}" in out and
               "docs/security.md" in out, f"{action}:\n{out[-1500:]}")
        expect(bucket_state("lp") == before, f"without {action}: the bucket changed")
    # The policy is the prefix's: another prefix of the same bucket is out of reach.
    S3.user("least", policy)
    with RunDir() as r:
        out = refused(train_args(r, *remote("elsewhere", S3.endpoint, *sse)), env, env["AWS_SECRET_ACCESS_KEY"])
    expect(f"needs s3:GetObject on arn:aws:s3:::{S3.bucket}/elsewhere/LATEST" in out, out[-1500:])


def test_the_documented_data_policies_are_sufficient_and_each_action_necessary():
    key_id, key_arn = S3.kms_key()
    writer = S3.user("packer", documented_policy("data-write", S3.bucket, "data", key_arn))
    reader_policy = documented_policy("data-read", S3.bucket, "data", key_arn)
    reader = S3.user("reader", reader_policy)
    with Scratch() as s:
        image_folder(s.file("folder"), per_class=6)
        pack = ["data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--to", S3.url("data"),
                "--samples-per-shard", "6", "--remote-endpoint", S3.endpoint, "--remote-sse", "aws:kms",
                "--remote-sse-kms-key-id", key_id]
        out = refused(pack, reader, reader["AWS_SECRET_ACCESS_KEY"])  # a reader cannot write
        expect(f"this request needs s3:PutObject on arn:aws:s3:::{S3.bucket}/data/train-000000.tar" in out, out[-1500:])
        dlrun(*pack, env=writer, check=0)
        shards = shards_config(s.file("c.yaml"), S3.url("data"), s.file("cache"))
        env = dict(reader, AWS_ENDPOINT_URL=S3.endpoint)
        with RunDir() as r:
            train(shards, r.path, "train.max_steps=2", env=env)
        for action in s3_actions(reader_policy):
            S3.user("reader", without(reader_policy, action))
            shutil.rmtree(s.file("cache"), ignore_errors=True)
            with RunDir() as r:
                out = refused(["train", shards, "--run-dir", r.path, "train.max_steps=2"], env,
                              reader["AWS_SECRET_ACCESS_KEY"])
            expect(f"HTTP 403 AccessDenied" in out and f"this request needs {action} on arn:aws:s3:::{S3.bucket}" in out,
                   f"{action}:\n{out[-1500:]}")
            # (a read refused: no hint at the encryption of writes)
            expect("checkpoint.remote_sse" not in out, f"{action}:\n{out[-1500:]}")


if __name__ == "__main__":
    with S3Server() as server:
        S3 = server
        main([test_tls_is_verified_against_the_cas_named_and_a_bad_certificate_is_a_refused_start,
              test_a_store_below_the_tls_floor_is_refused,
              test_plain_http_is_refused_unless_to_loopback_or_accepted_by_name,
              test_shards_and_pack_take_the_same_tls_and_plain_http_rules,
              test_sse_kms_on_every_object_satisfies_a_bucket_policy_and_is_checked_on_the_way_back,
              test_sse_s3_on_every_object_of_a_checkpoint,
              test_the_documented_checkpoint_policy_is_sufficient_and_each_action_necessary,
              test_the_documented_data_policies_are_sufficient_and_each_action_necessary])
