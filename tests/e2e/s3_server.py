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

With temporary credentials the endpoint is an HTTP gate in front of the proxy that answers
ExpiredToken, as AWS does, to a request signed with credentials past their lifetime (moto keeps
accepting them). Nothing here contacts anything but 127.0.0.1; the servers stop with the block.
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

        def pipe(a, b):
            try:
                while True:
                    data = a.recv(1 << 16)
                    if not data or self.is_down:
                        break
                    b.sendall(data)
            except OSError:
                pass
            finally:
                for s in (a, b):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        t = threading.Thread(target=pipe, args=(upstream, conn), daemon=True)
        t.start()
        pipe(conn, upstream)
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

    def _forward(self):
        gate = self.server.gate
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        m = re.search(r"Credential=([^/]+)/", self.headers.get("Authorization", ""))
        if m and gate.expired(m.group(1)):
            gate.refused += 1
            self.send_response(400)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(EXPIRED)))
            self.end_headers()
            self.wfile.write(EXPIRED)
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


class Gate:
    """An HTTP reverse proxy to `target` that refuses requests signed with expired credentials."""

    def __init__(self, target):
        self.target = target
        self.expiry = {}  # access key id -> wall time after which it is refused
        self.refused = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _GateHandler)
        self.server.daemon_threads = True
        self.server.gate = self
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def expired(self, key_id):
        return key_id in self.expiry and time.time() > self.expiry[key_id]

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

    def role_credentials(self, lifetime_s):
        """New temporary credentials of a role allowed everything on S3 (moto's STS AssumeRole), as a
        dict with AccessKeyId, SecretAccessKey, SessionToken; requests signed with them are refused
        with ExpiredToken once `lifetime_s` seconds have passed (through self.endpoint, which this
        turns into the gate)."""
        import boto3
        if not getattr(self, "gate", None):
            iam = boto3.client("iam", endpoint_url=self.direct, region_name=REGION, **self.admin)
            trust = {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}
            self.role_arn = iam.create_role(RoleName="dlrun-role", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
            iam.put_role_policy(RoleName="dlrun-role", PolicyName="s3", PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
            self.gate = Gate(self.proxy.port)
            self.endpoint = f"http://127.0.0.1:{self.gate.port}"
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
