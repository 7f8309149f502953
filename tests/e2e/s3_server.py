"""A real S3 implementation on 127.0.0.1 for the remote-checkpoint tests: moto's server, with
IAM authentication switched on (so request signatures are checked, as AWS checks them), behind
a TCP proxy the test can take down and bring back to play "the service is unreachable".

    with S3Server() as s3:
        env = s3.env                      # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION
        s3.endpoint                       # http://127.0.0.1:PORT (the proxy)
        s3.client().list_objects_v2(...)  # boto3, straight to moto
        s3.down(); s3.up()                # refuse, then serve again
        s3.stall(); s3.up()               # hang every new request, then serve again
        s3.revoke()                       # the key loses its permission: 403 AccessDenied
        s3.restrict(["s3:ListBucket"])    # the key may do these only
        s3.role_credentials(lifetime_s)   # temporary credentials of a role (STS, with a session
                                          # token), refused with ExpiredToken after lifetime_s
        s3.user("ro", policy)             # another IAM user holding `policy`: its env
        s3.kms_key()                      # a KMS key (moto's KMS): (id, arn)
        s3.create_bucket(name)            # another bucket
        s3.enforce_bucket_policy(name, policy)  # a bucket policy, evaluated by the gate (moto
                                          # cannot evaluate its conditions)

With temporary credentials the endpoint is an HTTP gate in front of the proxy that answers
ExpiredToken, as AWS does, to a request signed with credentials past their lifetime (moto keeps
accepting them); the same gate enforces a bucket policy's Deny statements on the encryption
headers of object writes (moto's server cannot evaluate their conditions). Nothing here contacts anything but 127.0.0.1; the servers stop with the block.
"""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BUCKET = "dlrun-ckpts"
REGION = "us-east-1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relay(a, b, stopped=lambda: False):
    """Copies what `a` receives to `b` until either end closes (or `stopped()`), then shuts both down."""
    try:
        while True:
            data = a.recv(1 << 16)
            if not data or stopped():
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass


class Proxy:
    """Forwards TCP connections to `port`; while down, every connection is closed at once; while
    stalled, new connections are accepted and then neither read nor answered (a black hole)."""

    def __init__(self, port):
        self.target = port
        self.is_down = False
        self.is_stalled = False
        self.held = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.is_down:
                conn.close()
                continue
            if self.is_stalled:
                self.held.append(conn)
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target))
        except OSError:
            conn.close()
            return

        t = threading.Thread(target=relay, args=(upstream, conn, lambda: self.is_down), daemon=True)
        t.start()
        relay(conn, upstream, lambda: self.is_down)
        t.join()
        conn.close()
        upstream.close()

    def release(self):
        self.is_stalled = False
        for c in self.held:
            c.close()
        self.held = []

    def close(self):
        self.closed = True
        self.release()
        self.sock.close()


EXPIRED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ExpiredToken</Code>'
           b'<Message>The provided token has expired.</Message><RequestId>0</RequestId></Error>')


class _GateHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _refuse(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _forward(self):
        gate = self.server.gate
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        m = re.search(r"Credential=([^/]+)/", self.headers.get("Authorization", ""))
        if m and gate.expired(m.group(1)):
            gate.refused += 1
            self._refuse(400, EXPIRED)
            return
        if gate.denied_by_policy(self.command, self.path, self.headers):
            gate.denied += 1
            self._refuse(403, ACCESS_DENIED)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("expect", "connection")}
        try:
            conn = http.client.HTTPConnection("127.0.0.1", gate.target, timeout=120)
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        except OSError:
            self.close_connection = True  # the proxy behind is down: so is the service
            return
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = _forward


ACCESS_DENIED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
                 b'<Message>Access Denied</Message><RequestId>0</RequestId></Error>')

# A bucket policy's condition keys on the request headers of an object write.
_CONDITION_HEADERS = {"s3:x-amz-server-side-encryption": "x-amz-server-side-encryption",
                      "s3:x-amz-server-side-encryption-aws-kms-key-id": "x-amz-server-side-encryption-aws-kms-key-id"}


class Gate:
    """An HTTP reverse proxy to `target` that refuses requests signed with expired credentials,
    and the object writes a bucket policy's Deny statements refuse."""

    def __init__(self, target):
        self.target = target
        self.expiry = {}  # access key id -> wall time after which it is refused
        self.refused = 0
        self.policies = {}  # bucket -> its policy document (dict), enforced
        self.denied = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _GateHandler)
        self.server.daemon_threads = True
        self.server.gate = self
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def expired(self, key_id):
        return key_id in self.expiry and time.time() > self.expiry[key_id]

    def denied_by_policy(self, method, path, headers):
        """Whether the policy's Deny statements on s3:PutObject refuse this request. They apply where
        S3 takes the encryption headers: a PUT of an object or a copy, and the start of a multipart
        upload (its parts and its completion carry none: the upload's own settings apply to them)."""
        where, _, query = path.partition("?")
        bucket, _, key = where.strip("/").partition("/")  # path-style requests
        policy = self.policies.get(bucket)
        writes = (method == "PUT" and key and "partNumber=" not in query) or \
            (method == "POST" and re.search(r"(^|&)uploads(=|&|$)", query))
        if not policy or not writes:
            return False
        for st in policy["Statement"]:
            if st.get("Effect") != "Deny" or "s3:PutObject" not in ([st["Action"]] if isinstance(st["Action"], str)
                                                                     else st["Action"]):
                continue
            for op, conds in st.get("Condition", {}).items():
                for key, want in conds.items():
                    got = headers.get(_CONDITION_HEADERS[key])
                    if op == "Null" and (got is None) == (str(want).lower() == "true"):
                        return True
                    if op == "StringNotEquals" and got is not None and got not in ([want] if isinstance(want, str) else want):
                        return True
        return False

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _FixedAnswerHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body, status = self.server.body, 200
        if self.path.split("?")[0].endswith("/LATEST"):  # no such key: the listing is what is answered
            body, status = b"<Error><Code>NoSuchKey</Code></Error>", 404
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FixedAnswer:
    """A hostile or broken "S3 endpoint" on 127.0.0.1 answering every listing with `self.body`
    (and a GET of LATEST with 404).

        with FixedAnswer() as ep:
            ep.body = b"<ListBucketResult>..."; ep.endpoint   # http://127.0.0.1:PORT
    """

    def __enter__(self):
        self.body = b""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _FixedAnswerHandler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *args: None  # a client that hung up on a refused answer
        self.server.body = b""
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name == "body" and hasattr(self, "server"):
            self.server.body = value

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class S3Server:
    def __init__(self, bucket=BUCKET):
        self.bucket = bucket

    def __enter__(self):
        import boto3

        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.direct = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(self.direct + "/moto-api/", timeout=1).read()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.__exit__(None, None, None)
                    raise RuntimeError("moto's S3 server did not start")
                time.sleep(0.1)
        # Before authentication is switched on: a user allowed everything on S3, its key, the bucket.
        anon = dict(endpoint_url=self.direct, region_name=REGION, aws_access_key_id="setup",
                    aws_secret_access_key="setup")
        iam = boto3.client("iam", **anon)
        iam.create_user(UserName="dlrun")
        iam.put_user_policy(UserName="dlrun", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="dlrun")["AccessKey"]
        self.key_id, self.secret = key["AccessKeyId"], key["SecretAccessKey"]
        # An administrator, to take the permission away again (revoke()).
        iam.create_user(UserName="admin")
        iam.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        admin = iam.create_access_key(UserName="admin")["AccessKey"]
        self.admin = dict(aws_access_key_id=admin["AccessKeyId"], aws_secret_access_key=admin["SecretAccessKey"])
        boto3.client("s3", **anon).create_bucket(Bucket=self.bucket)
        req = urllib.request.Request(self.direct + "/moto-api/reset-auth", data=b"0", method="POST",
                                     headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(req, timeout=5).read()  # from now on every request is authenticated
        self.proxy = Proxy(self.port)
        self.endpoint = f"http://127.0.0.1:{self.proxy.port}"
        self.env = {"AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": REGION}
        return self

    def __exit__(self, *exc):
        if getattr(self, "gate", None):
            self.gate.close()
        if getattr(self, "proxy", None):
            self.proxy.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def url(self, prefix):
        return f"s3://{self.bucket}/{prefix}"

    def overrides(self, prefix, *extra):
        """The dlrun overrides that point checkpoint.remote at this server."""
        return (f"checkpoint.remote={self.url(prefix)}", f"checkpoint.remote_endpoint={self.endpoint}", *extra)

    def client(self):
        import boto3
        return boto3.client("s3", endpoint_url=self.direct, region_name=REGION, aws_access_key_id=self.key_id,
                            aws_secret_access_key=self.secret)

    def keys(self, prefix):
        out = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix + "/"):
            out += [o["Key"][len(prefix) + 1:] for o in page.get("Contents", [])]
        return sorted(out)

    def read(self, key):
        return self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def write(self, key, data):
        self.client().put_object(Bucket=self.bucket, Key=key, Body=data)

    def down(self):
        self.proxy.is_down = True

    def up(self):
        self.proxy.is_down = False
        self.proxy.release()

    def revoke(self):
        """Take S3 access away from the test's key: from now on its requests get 403 AccessDenied."""
        import boto3
        iam = boto3.client("iam", endpoint_url=self.direct, region_name=REGION, **self.admin)
        iam.delete_user_policy(UserName="dlrun", PolicyName="s3")

    def restrict(self, actions):
        """From now on the test's key may do `actions` only (others: 403 AccessDenied)."""
        import boto3
        iam = boto3.client("iam", endpoint_url=self.direct, region_name=REGION, **self.admin)
        iam.put_user_policy(UserName="dlrun", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}))

    def _gate(self):
        """The endpoint becomes the gate (in front of the proxy)."""
        if not getattr(self, "gate", None):
            self.gate = Gate(self.proxy.port)
            self.endpoint = f"http://127.0.0.1:{self.gate.port}"
        return self.gate

    def iam(self):
        import boto3
        return boto3.client("iam", endpoint_url=self.direct, region_name=REGION, **self.admin)

    def user(self, name, policy):
        """An IAM user `name` holding exactly `policy` (a dict; replaced when the user exists): its
        credentials as environment variables."""
        iam = self.iam()
        try:
            iam.create_user(UserName=name)
            key = iam.create_access_key(UserName=name)["AccessKey"]
            self.users = getattr(self, "users", {})
            self.users[name] = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
                                "AWS_REGION": REGION}
        except iam.exceptions.EntityAlreadyExistsException:
            pass
        iam.put_user_policy(UserName=name, PolicyName="dlrun", PolicyDocument=json.dumps(policy))
        return self.users[name]

    def kms_key(self):
        """A new symmetric key in moto's KMS: (key id, key ARN)."""
        import boto3
        kms = boto3.client("kms", endpoint_url=self.direct, region_name=REGION, **self.admin)
        meta = kms.create_key(Description="dlrun checkpoints")["KeyMetadata"]
        return meta["KeyId"], meta["Arn"]

    def create_bucket(self, name):
        import boto3
        boto3.client("s3", endpoint_url=self.direct, region_name=REGION, **self.admin).create_bucket(Bucket=name)

    def enforce_bucket_policy(self, bucket, policy):
        """The gate evaluates `policy`'s Deny statements on the object writes to `bucket`. (Not put into
        moto: its server evaluates a Deny statement without its conditions, so it would deny every put.)"""
        self._gate().policies[bucket] = policy

    def role_credentials(self, lifetime_s):
        """New temporary credentials of a role allowed everything on S3 (moto's STS AssumeRole), as a
        dict with AccessKeyId, SecretAccessKey, SessionToken; requests signed with them are refused
        with ExpiredToken once `lifetime_s` seconds have passed (through self.endpoint, which this
        turns into the gate)."""
        import boto3
        if not getattr(self, "role_arn", None):
            iam = self.iam()
            trust = {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}
            self.role_arn = iam.create_role(RoleName="dlrun-role", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
            iam.put_role_policy(RoleName="dlrun-role", PolicyName="s3", PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
            self._gate()
            self.issued = 0
        sts = boto3.client("sts", endpoint_url=self.direct, region_name=REGION, **self.admin)
        self.issued += 1
        c = sts.assume_role(RoleArn=self.role_arn, RoleSessionName=f"dlrun-{self.issued}")["Credentials"]
        self.gate.expiry[c["AccessKeyId"]] = time.time() + lifetime_s
        return {"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"], "SessionToken": c["SessionToken"]}

    def stall(self):
        """From now on a request is accepted and never answered: an upload hangs in flight."""
        self.proxy.is_stalled = True


if __name__ == "__main__":  # a manual check: start, print the endpoint and keys, wait
    with S3Server() as s:
        print(s.endpoint, s.env, flush=True)
        os.system("sleep 3600")
