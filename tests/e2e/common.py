"""Shared helpers of the end-to-end tests: run dlrun, read a run directory, compare runs.

The tests run the real `dlrun` binary (path in $DLRUN) on small configs under
tests/e2e/data, each in a fresh temporary run directory that is removed afterwards.
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

DLRUN = os.environ["DLRUN"]
# No test asks a real cloud's instance metadata service for credentials, nor reads the
# machine's own AWS files: the tests that want either point them at their own fakes.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
for _var in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
    os.environ.setdefault(_var, "/nonexistent/dlrun-tests")
SRC = os.environ["DLRUN_SOURCE_DIR"]
DATA = os.path.join(SRC, "tests", "e2e", "data")


def cfg(name):
    return os.path.join(DATA, name)


class RunDir:
    """A temporary run directory (removed on exit unless DLRUN_KEEP_TMP is set)."""

    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="dlrun-e2e-")
        return self

    def __exit__(self, *exc):
        if not os.environ.get("DLRUN_KEEP_TMP"):
            shutil.rmtree(self.path, ignore_errors=True)

    def file(self, *parts):
        return os.path.join(self.path, *parts)

    def summary(self):
        with open(self.file("summary.json")) as f:
            return json.load(f)

    def metrics(self):
        with open(self.file("metrics.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]

    def step_losses(self):
        """step -> loss from metrics.jsonl (the last record of a step wins)."""
        return {m["step"]: m["loss"] for m in self.metrics() if "loss" in m and "event" not in m}


def snapshot(path):
    """Every file under `path` with its size, mtime and SHA-256: 'exactly as it was'."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.stat(p)
            digest = hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.isfile(p) else "dir"
            out[os.path.relpath(p, path)] = (st.st_size if os.path.isfile(p) else 0, st.st_mtime_ns, digest)
    return out


def environment(env=None):
    """os.environ without DLRUN_FAULT, updated with `env` (a value None unsets that variable)."""
    e = dict(os.environ)
    e.pop("DLRUN_FAULT", None)
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def dlrun(*args, env=None, check=None, timeout=600):
    """Run dlrun; return CompletedProcess. `check` = expected exit code (None: any)."""
    e = environment(env)
    p = subprocess.run([DLRUN, *args], env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    if check is not None and p.returncode != check:
        print(p.stdout)
        raise AssertionError(f"dlrun {' '.join(args)} exited {p.returncode}, expected {check}")
    return p


def train(config, run_dir, *overrides, env=None, check=0, extra=()):
    return dlrun("train", config, *overrides, "--run-dir", run_dir, "log.progress=none", *extra,
                 env=env, check=check)


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def main(tests):
    """Run test functions; print a pytest-like closing line; exit non-zero on failure."""
    failed = 0
    only = sys.argv[1:]
    for t in tests:
        if only and t.__name__ not in only:
            continue
        start = time.time()
        try:
            t()
            print(f"PASS {t.__name__} ({time.time() - start:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failure the same way
            failed += 1
            print(f"FAIL {t.__name__}: {e}", flush=True)
    sys.exit(1 if failed else 0)
