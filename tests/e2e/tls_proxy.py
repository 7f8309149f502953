"""TLS in front of the local S3 service, for the tests of verified TLS (test_remote_security.py):
certificate authorities and server certificates made with the `openssl` command (good, expired,
for another host name, from a CA nobody trusts), and a TLS terminator on 127.0.0.1 that speaks
TLS with one of them -- optionally no newer than TLS 1.2 -- and forwards the plain bytes to a
port behind it.

    with tempfile.TemporaryDirectory() as d:
        ca = Pki(d, "ca")                                   # a CA: ca.pem
        good = ca.issue("good", hosts=["127.0.0.1"])        # (cert, key) signed by it
        old = ca.issue("old", hosts=["127.0.0.1"], expired=True)
        with TlsProxy(good, s3.proxy.port) as t:            # t.endpoint: https://127.0.0.1:PORT
            ...

Nothing here contacts anything but 127.0.0.1; the terminator stops with the block.
"""
import os
import socket
import ssl
import subprocess
import threading

from s3_server import relay

_CA_CONFIG = """[ca]
default_ca = test
[test]
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = any
unique_subject = no
[any]
commonName = supplied
"""


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _ec_key_and_request(key, csr, subject):
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
             "-out", csr, "-subj", subject)


class Pki:
    """A certificate authority in `base`/`name`/: its certificate is `self.pem`."""

    def __init__(self, base, name):
        self.dir = os.path.join(base, name)
        os.makedirs(self.dir)
        self.key, self.pem = os.path.join(self.dir, "ca.key"), os.path.join(self.dir, "ca.pem")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", self.key, "-out", self.pem, "-days", "2", "-subj", f"/CN=dlrun test CA {name}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        open(os.path.join(self.dir, "index.txt"), "w").close()
        with open(os.path.join(self.dir, "serial"), "w") as f:
            f.write("01\n")
        self.config = os.path.join(self.dir, "ca.cnf")
        with open(self.config, "w") as f:
            f.write(_CA_CONFIG.format(dir=self.dir))

    def issue(self, name, hosts, expired=False):
        """A server certificate for `hosts` (IP addresses or DNS names), valid from yesterday for two
        days, or expired in 2020: (certificate file, key file)."""
        key, csr, pem, ext = (os.path.join(self.dir, f"{name}.{x}") for x in ("key", "csr", "pem", "ext"))
        _ec_key_and_request(key, csr, f"/CN={hosts[0]}")
        names = ",".join(("IP:" if h.replace(".", "").isdigit() else "DNS:") + h for h in hosts)
        with open(ext, "w") as f:
            f.write(f"subjectAltName={names}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        dates = ["-startdate", "20200101000000Z", "-enddate", "20200102000000Z"] if expired else ["-days", "2"]
        _openssl("ca", "-batch", "-notext", "-config", self.config, "-cert", self.pem, "-keyfile", self.key,
                 "-in", csr, "-out", pem, "-extfile", ext, *dates)
        return pem, key


class TlsProxy:
    """TLS on 127.0.0.1 with `cert` = (certificate, key), forwarding to 127.0.0.1:`target`. With
    `max_version` (ssl.TLSVersion) it offers nothing newer. `handshakes` counts the connections
    whose handshake completed on this side, `failed` those whose did not (with TLS 1.3 the client
    checks the certificate after the server has finished: a refusal may count as either)."""

    def __init__(self, cert, target, max_version=None):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*cert)
        if max_version is not None:
            self.ctx.maximum_version = max_version
        self.target = target
        self.handshakes = self.failed = 0

    def connections(self):
        return self.handshakes + self.failed

    def __enter__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.endpoint = f"https://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.closed = True
        self.sock.close()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(30)
        try:
            tls = self.ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            self.failed += 1  # the client refused the certificate, or offered no common version
            conn.close()
            return
        self.handshakes += 1
        tls.settimeout(None)
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target))
        except OSError:
            tls.close()
            return

        t = threading.Thread(target=relay, args=(upstream, tls), daemon=True)
        t.start()
        relay(tls, upstream)
        t.join()
        tls.close()
        upstream.close()
