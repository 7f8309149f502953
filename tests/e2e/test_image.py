"""The container image (scripts/image.sh) run as a platform runs it, with podman and no Docker:

- it builds (the base layer cached on this machine between runs: a second build adds dlrun's
  layer alone) and its OCI archive is one skopeo reads: the labels (version, git revision, torch,
  CUDA), the user, the entrypoint; `podman load` loads it, and skopeo pushes it to a registry
  (Debian's docker-registry on 127.0.0.1, its storage kept in ~/.cache/dlrun/registry-e2e so that
  the base's blob is uploaded once per machine), from which it reads the labels back;
- `dlrun train configs/quickstart.yaml` runs in it as a non-root user on a read-only root file
  system, the run directory on a mounted volume;
- stopped as the kubelet stops a container (`podman stop -t N`: SIGTERM, then SIGKILL after the
  grace period) it exits 75 with a committed checkpoint, and a second container resumes from it
  to the same params_sha256 as an uninterrupted run.

podman runs with `--runtime runc` and explicit `--ulimit nofile/nproc` (crun fails on these
machines' hybrid cgroups; docs/deploy.md). Every container the test starts, it removes.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from common import DLRUN, expect, main
from containers import LIMITS, PODMAN, build_image, sh, tag

TAG = tag("e2e")
IMAGE = f"localhost/dlrun:{TAG}"
RUN = ["run", *LIMITS, "--read-only", "--tmpfs", "/tmp", "--network", "none"]
STEPS = 60
FIXED = ("run.deterministic=true", "run.threads=2", f"train.max_steps={STEPS}", "checkpoint.every_steps=10",
         "log.progress=none", "train.eval_at_end=false")


def build(*options):
    return build_image(TAG, *options)


def train(volume, run_dir, *extra, name=None, detach=False, env=()):
    args = [*PODMAN, *RUN, "-v", f"{volume}:/runs"]
    args += ["--name", name] if name else ["--rm"]
    if detach:
        args += ["-d"]
    for e in env:
        args += ["-e", e]
    args += [IMAGE, "train", "/opt/dlrun/configs/quickstart.yaml", "--run-dir", f"/runs/{run_dir}", *FIXED, *extra]
    return sh(args, check=False, timeout=600)


class Registry:
    """Debian's docker-registry on a free loopback port; its storage persists between runs."""

    def __init__(self):
        self.root = os.path.expanduser("~/.cache/dlrun/registry-e2e")
        os.makedirs(self.root, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.config = os.path.join(self.root, "config.yml")
        with open(self.config, "w") as f:
            f.write(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {self.root}/data\n"
                    f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{self.port}\n")
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(["docker-registry", "serve", self.config], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                expect(self.proc.poll() is None and time.monotonic() < deadline, "the registry did not start")
                time.sleep(0.1)

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        # The blobs no tag names any more (an earlier run's top layer): gone, so the storage stays
        # about the size of one image.
        subprocess.run(["docker-registry", "garbage-collect", self.config], capture_output=True, timeout=300)


def summary(volume, run_dir):
    with open(os.path.join(volume, run_dir, "summary.json")) as f:
        return json.load(f)


def test_image_builds_runs_stops_and_resumes():
    with tempfile.TemporaryDirectory(prefix="dlrun-image-") as tmp:
        archive = os.path.join(tmp, "dlrun.oci.tar")
        build("--out", archive)
        # The archive loads into podman (as another tag) and runs.
        sh(["podman", "load", "-q", "-i", archive])
        sh(["podman", "tag", IMAGE, f"{IMAGE}-loaded"])
        p = sh([*PODMAN, *RUN, "--rm", f"{IMAGE}-loaded", "--version"])
        expect(p.stdout.startswith("dlrun "), p.stdout)
        sh(["podman", "rmi", f"{IMAGE}-loaded"])
        with Registry() as reg:  # a registry push of the archive, and the image read back from there
            # One tag, moved by every run: the blobs the previous run's top layer left are collected,
            # the base's stays (pushed once per machine).
            ref = f"docker://127.0.0.1:{reg.port}/dlrun:e2e-last"
            t0 = time.monotonic()
            sh(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci-archive:{archive}", ref], timeout=900)
            pushed = json.loads(sh(["skopeo", "inspect", "--tls-verify=false", ref]).stdout)
            expect(pushed["Labels"].get("org.opencontainers.image.title") == "dlrun", pushed["Labels"])
            print(f"  pushed to a registry on 127.0.0.1 in {time.monotonic() - t0:.0f} s")
        second = build()  # only dlrun's layer: the base is cached
        expect("cached" in second, second)

        # The archive: labels, user, entrypoint, as a registry client reads them.
        info = json.loads(sh(["skopeo", "inspect", "--config", f"oci-archive:{archive}"]).stdout)
        config, labels = info["config"], info["config"]["Labels"]
        said = sh([DLRUN, "--version"]).stdout  # "dlrun 0.1.0 (git 4ea2dcf3ea1e, torch 2.11.0, Release)"
        version, revision = said.split()[1], said.split("(git ")[1].split(",")[0]
        expect(labels.get("org.opencontainers.image.version") == version and
               labels.get("org.opencontainers.image.revision") == revision and
               labels.get("io.dlrun.torch") and labels.get("io.dlrun.cuda"), labels)
        expect(config.get("User") == "dlrun" and config.get("Entrypoint") == ["/opt/dlrun/bin/dlrun"], config)

        # Non-root, read-only root file system.
        p = sh([*PODMAN, *RUN, "--rm", "--entrypoint", "/bin/sh", IMAGE, "-c",
                "id -u; touch /opt/dlrun/x 2>/dev/null && echo writable || echo read-only; "
                "dlrun-launch --help >/dev/null && echo launcher"])
        expect(p.stdout.split() == ["1000", "read-only", "launcher"], p.stdout + p.stderr)

        volume = os.path.join(tmp, "runs")
        os.mkdir(volume)
        os.chown(volume, 1000, 1000)  # the image's user writes the run directories
        name = f"dlrun-e2e-{os.getpid()}"
        try:
            p = train(volume, "whole", name=None)
            expect(p.returncode == 0, f"the uninterrupted run exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
            whole = summary(volume, "whole")

            # Stopped as the kubelet stops it, mid-run (slowed so that the stop lands mid-run).
            p = train(volume, "stopped", name=name, detach=True, env=("DLRUN_FAULT=slow_batch:200",))
            expect(p.returncode == 0, p.stderr)
            metrics = os.path.join(volume, "stopped", "metrics.jsonl")
            deadline = time.monotonic() + 300
            while True:  # until the first periodic checkpoint (step 10 of 60; 200 ms a step)
                saved = False
                if os.path.exists(metrics):
                    with open(metrics) as f:
                        saved = any('"event":"checkpoint"' in line for line in f)
                if saved:
                    break
                expect(time.monotonic() < deadline, "the run saved no checkpoint in 300 s")
                time.sleep(0.1)
            sh([*PODMAN, "stop", "-t", "60", name])
            code = int(sh([*PODMAN, "inspect", "--format", "{{.State.ExitCode}}", name]).stdout.strip())
            logs = sh([*PODMAN, "logs", name]).stderr + sh([*PODMAN, "logs", name]).stdout
            expect(code == 75, f"podman stop: exit {code}, not 75:\n{logs[-2000:]}")
            stopped = summary(volume, "stopped")
            expect(stopped["status"] == "interrupted" and stopped["checkpoint"], stopped)
            sh([*PODMAN, "rm", name])

            p = train(volume, "stopped")  # a new container: --resume auto from the committed checkpoint
            expect(p.returncode == 0, f"the resumed run exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
            resumed = summary(volume, "stopped")
            expect(resumed["resumed_from_step"] > 0, resumed)
            expect(resumed["params_sha256"] == whole["params_sha256"],
                   f"resumed {resumed['params_sha256']} != uninterrupted {whole['params_sha256']}")
            print(f"  stopped at step {stopped['steps']} (exit 75), resumed from {resumed['resumed_from_step']}: "
                  f"params_sha256 {whole['params_sha256'][:16]} as the uninterrupted run")
        finally:
            subprocess.run([*PODMAN, "rm", "-f", name], capture_output=True)
            subprocess.run(["podman", "rmi", "-f", IMAGE], capture_output=True)  # (the base stays: the cache)
            subprocess.run(["chown", "-R", f"{os.getuid()}:{os.getgid()}", volume], capture_output=True)


if __name__ == "__main__":
    sys.exit(main([test_image_builds_runs_stops_and_resumes]))
