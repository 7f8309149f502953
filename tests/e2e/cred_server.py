"""Fake credential services on 127.0.0.1, as the clouds run them, handing out temporary
credentials of a role in the test's S3 server (s3_server.S3Server.role_credentials):

    with CredentialServer(s3, lifetime_s=6, announced_s=None) as cs:
        cs.imds_env       # AWS_EC2_METADATA_SERVICE_ENDPOINT: EC2's instance metadata (IMDSv2)
        cs.container_env  # AWS_CONTAINER_CREDENTIALS_FULL_URI + authorization token file (ECS, EKS)
        cs.sts_env        # AWS_ENDPOINT_URL_STS + AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (IRSA)
        cs.handed_out     # {"imds": n, "container": n, "sts": n}

Each answer is a fresh pair of credentials that the S3 gate refuses (ExpiredToken) after
`lifetime_s`; the answer announces an Expiration `announced_s` from now (default: the lifetime;
longer: the credentials are revoked early, and only a re-fetch on ExpiredToken gets past it).
The services check what the real ones require -- IMDSv2's session token, the container
endpoint's Authorization header, STS's web identity token and role -- and refuse otherwise.
No real cloud address is contacted; the server stops with the block."""
import json
import os
import secrets
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        cs = self.server.cs
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self._send(200, cs.imds_token, "text/plain")
        self._send(400, "bad token request", "text/plain")

    def do_GET(self):
        cs = self.server.cs
        base = "/latest/meta-data/iam/security-credentials/"
        if self.path.startswith(base):
            if self.headers.get("X-aws-ec2-metadata-token") != cs.imds_token:
                return self._send(401, "", "text/plain")  # IMDSv2: no session token, no answer
            if self.path == base:
                return self._send(200, "dlrun-instance-role\n", "text/plain")
            if self.path == base + "dlrun-instance-role":
                return self._send(200, json.dumps(cs.issue("imds", Code="Success", Type="AWS-HMAC")))
            return self._send(404, "", "text/plain")
        if self.path == "/v2/credentials/task":
            if self.headers.get("Authorization") != cs.container_token:
                return self._send(403, json.dumps({"Message": "bad authorization"}))
            return self._send(200, json.dumps(cs.issue("container", RoleArn=cs.s3.role_arn)))
        self._send(404, "", "text/plain")

    def do_POST(self):
        cs = self.server.cs
        length = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        get = lambda k: form.get(k, [""])[0]  # noqa: E731
        if (get("Action") != "AssumeRoleWithWebIdentity" or get("WebIdentityToken") != cs.web_token or
                get("RoleArn") != cs.s3.role_arn or not get("RoleSessionName")):
            err = ("<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
                   "<Message>bad web identity request</Message></Error></ErrorResponse>")
            return self._send(400, err, "text/xml")
        c = cs.issue("sts")
        xml = ("<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
               "<AssumeRoleWithWebIdentityResult><Credentials>"
               f"<AccessKeyId>{c['AccessKeyId']}</AccessKeyId><SecretAccessKey>{c['SecretAccessKey']}</SecretAccessKey>"
               f"<SessionToken>{c['Token']}</SessionToken><Expiration>{c['Expiration']}</Expiration>"
               "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>")
        self._send(200, xml, "text/xml")


class CredentialServer:
    def __init__(self, s3, lifetime_s=3600, announced_s=None):
        self.s3, self.lifetime_s = s3, lifetime_s
        self.announced_s = lifetime_s if announced_s is None else announced_s
        self.handed_out = {"imds": 0, "container": 0, "sts": 0}
        self.secrets = []  # every secret handed out: none may appear in a log or the run directory
        self.lock = threading.Lock()

    def __enter__(self):
        self.s3.role_credentials(1)  # creates the role and turns the endpoint into the gate
        self.imds_token = secrets.token_hex(16)
        self.container_token = "Bearer " + secrets.token_hex(16)
        self.web_token = "eyJ" + secrets.token_hex(24)
        self.dir = tempfile.mkdtemp(prefix="dlrun-creds-")
        self.container_token_file = os.path.join(self.dir, "container-token")
        self.web_token_file = os.path.join(self.dir, "web-identity-token")
        open(self.container_token_file, "w").write(self.container_token + "\n")
        open(self.web_token_file, "w").write(self.web_token + "\n")
        self.secrets += [self.container_token.split()[1], self.web_token]
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.cs = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        no_keys = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_SESSION_TOKEN": None,
                   "AWS_PROFILE": None, "AWS_SHARED_CREDENTIALS_FILE": os.path.join(self.dir, "none"),
                   "AWS_CONFIG_FILE": os.path.join(self.dir, "none")}
        self.imds_env = dict(no_keys, AWS_EC2_METADATA_SERVICE_ENDPOINT=self.url, AWS_EC2_METADATA_DISABLED=None)
        self.container_env = dict(no_keys, AWS_CONTAINER_CREDENTIALS_FULL_URI=self.url + "/v2/credentials/task",
                                  AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=self.container_token_file)
        self.sts_env = dict(no_keys, AWS_ENDPOINT_URL_STS=self.url, AWS_WEB_IDENTITY_TOKEN_FILE=self.web_token_file,
                            AWS_ROLE_ARN=self.s3.role_arn, AWS_ROLE_SESSION_NAME="dlrun-test")
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def issue(self, kind, **extra):
        with self.lock:
            self.handed_out[kind] += 1
            c = self.s3.role_credentials(self.lifetime_s)
            self.secrets += [c["SecretAccessKey"], c["SessionToken"]]
        return dict(extra, AccessKeyId=c["AccessKeyId"], SecretAccessKey=c["SecretAccessKey"], Token=c["SessionToken"],
                    Expiration=iso(time.time() + self.announced_s))
