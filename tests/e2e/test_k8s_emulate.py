"""Each Kubernetes manifest of examples/k8s/ emulated with podman: its pods as containers of the
image (scripts/image.sh), with the manifest's own command, args and environment, two pods in one
network namespace (the second container joins the first's: the headless Service's and the
operators' DNS names replaced by 127.0.0.1), JOB_COMPLETION_INDEX and the PyTorchJob operator's PET_* variables set as the
controllers set them. One pod is stopped as the kubelet stops it (`podman stop -t N`: SIGTERM,
then SIGKILL after the grace period): both pods exit 75 with a committed checkpoint, and the
pods started again (as the controller restarts them) resume to the params_sha256 of an
uninterrupted run.

What is changed for a CPU: the training config is tests/e2e/data/tiny.yaml (mounted) instead of
ImageNet, one rank per pod instead of 8, no bucket (the pods' /scratch is one volume kept across
the restarts, as a ReadWriteMany volume would be; the manifests' checkpoint.remote does the same
on a cluster). docs/deploy.md calls this "validated and emulated, not run on a cluster".
Needs the image: it builds it (the base cached) unless DLRUN_IMAGE names one.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

from common import SRC, cfg, expect, main
from containers import LIMITS, PODMAN, build_image, sh, tag

TAG = tag("k8s")
STEPS = 30
# The manifests' training command, kept up to the config; what follows it is replaced by these.
TRAIN = ["/cfg/tiny.yaml", "--run-dir", "/scratch/run", f"train.max_steps={STEPS}", "checkpoint.every_steps=5",
         "run.threads=1", "run.deterministic=true", "log.progress=none", "train.eval_at_end=false",
         "preemption.deadline_s=60"]


def manifest(name):
    with open(os.path.join(SRC, "examples", "k8s", name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def pods(docs):
    """[(container spec, {variable: value} the controller adds)] for the two pods of a manifest."""
    for d in docs:
        if d["kind"] == "Job":
            c = d["spec"]["template"]["spec"]["containers"][0]
            return [(c, {"JOB_COMPLETION_INDEX": str(i)}) for i in range(2)]
        if d["kind"] == "JobSet":
            c = d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
            return [(c, {"JOB_COMPLETION_INDEX": str(i), "JOBSET_NAME": d["metadata"]["name"]}) for i in range(2)]
        if d["kind"] == "PyTorchJob":
            spec, name = d["spec"], d["metadata"]["name"]
            e = spec["elasticPolicy"]
            c = spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
            # What the Training Operator sets in an elastic job's pods (its rendezvous endpoint is
            # the first worker's Service, <job>-worker-0, port rdzvPort, 29400 by default).
            pet = {"PET_NNODES": f"{e['minReplicas']}:{e['maxReplicas']}", "PET_NPROC_PER_NODE": "1",
                   "PET_RDZV_BACKEND": e["rdzvBackend"], "PET_RDZV_ENDPOINT": f"{name}-worker-0:29400",
                   "PET_RDZV_ID": name, "PET_MAX_RESTARTS": str(e["maxRestarts"]),
                   "PET_RDZV_CONF": "last_call_timeout=1"}
            return [(c, dict(pet)) for _ in range(2)]
    raise AssertionError("no Job, JobSet or PyTorchJob")


def command_of(container, added, names):
    """The container's command line as the kubelet runs it: $(VAR) expanded from its environment,
    the DNS names replaced by loopback, one rank per pod, and the training part replaced (TRAIN)."""
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    env.update(added)
    words = []
    for w in container["command"] + container["args"]:
        w = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), w)
        for n in names:
            w = w.replace(n, "127.0.0.1")
        words.append(w)
    if "--nproc-per-node" in words:
        words[words.index("--nproc-per-node") + 1] = "1"
    i = words.index("train")
    expect(words[i + 1].startswith("/opt/dlrun/configs/"), words)
    words = words[:i + 1] + TRAIN
    for k in list(env):
        for n in names:
            env[k] = env[k].replace(n, "127.0.0.1")
    return words, env


def start(image, pod, index, words, env, scratch, fault=""):
    """Container `index` of the pair; the second joins the first's network namespace, so that the
    two share 127.0.0.1 as two pods reach each other through the Service."""
    name = f"{pod}-{index}"
    network = "none" if index == 0 else f"container:{pod}-0"
    args = [*PODMAN, "run", "-d", "--network", network, "--name", name, *LIMITS, "--read-only", "--tmpfs", "/tmp", "-v", f"{scratch}:/scratch",
            "-v", f"{cfg('tiny.yaml')}:/cfg/tiny.yaml:ro", "--entrypoint", words[0]]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    if fault:
        args += ["-e", f"DLRUN_FAULT={fault}"]
    sh(args + [image] + words[1:])
    return name


def exit_code(name, timeout=300):
    sh([*PODMAN, "wait", name], timeout=timeout)
    return int(sh([*PODMAN, "inspect", "--format", "{{.State.ExitCode}}", name]).stdout.strip())


def logs(name):
    p = sh([*PODMAN, "logs", name], check=False)
    return (p.stdout + p.stderr)[-2500:]


def run_pods(image, pod, specs, scratch, stop_one=False, elastic=False):
    """Both pods once; with stop_one, pod 1 is stopped as the kubelet stops it after rank 0's first
    checkpoint. An elastic job's pod 0 does not stop: its launcher waits for a new round, and pod 1
    is started again (as the kubelet restarts a container of restartPolicy OnFailure), after it
    exited 75. Returns the exit codes and logs: pod 0's and pod 1's (its last container's)."""
    try:
        names = [start(image, pod, i, words, env, scratch[i], fault="slow_batch:150" if stop_one else "")
                 for i, (words, env) in enumerate(specs)]
        if stop_one:
            metrics = os.path.join(scratch[0], "run", "metrics.jsonl")
            deadline = time.monotonic() + 240
            while not (os.path.exists(metrics) and '"event":"checkpoint"' in open(metrics).read()):
                expect(time.monotonic() < deadline, f"no checkpoint in 240 s:\n{logs(names[0])}")
                time.sleep(0.1)
            sh([*PODMAN, "stop", "-t", "60", names[1]], timeout=120)
            if elastic:
                code = exit_code(names[1])
                expect(code == 75, f"the stopped pod exited {code}, not 75:\n{logs(names[1])}")
                words, env = specs[1]
                names.append(start(image, pod, "1-restarted", words, env, scratch[1]))
                names = [names[0], names[2]]
        codes = [exit_code(n) for n in names]
        return codes, [logs(n) for n in names]
    finally:
        for name in (f"{pod}-1", f"{pod}-1-restarted", f"{pod}-0"):  # (one at a time: a missing one fails the call)
            sh([*PODMAN, "rm", "-f", "-i", name], check=False)


def image():
    if os.environ.get("DLRUN_IMAGE"):
        return os.environ["DLRUN_IMAGE"]
    build_image(TAG)
    return f"localhost/dlrun:{TAG}"


def scratch_dirs(tmp, label):
    """The pods' /scratch: one directory for both, as a ReadWriteMany volume (or the bucket of
    checkpoint.remote) is one for every pod -- an elastic round may give rank 0 to either pod."""
    d = os.path.join(tmp, label)
    os.mkdir(d)
    os.chown(d, 1000, 1000)
    return [d, d]


def summary(d):
    with open(os.path.join(d, "run", "summary.json")) as f:
        return json.load(f)


def test_each_manifest_stops_with_75_and_resumes_exactly():
    img = image()
    cases = (("dlrun-indexed-job.yaml", ["dlrun-resnet50-0.dlrun-resnet50"], False),
             ("dlrun-jobset.yaml", ["dlrun-resnet50-node-0-0.dlrun-resnet50"], False),
             ("dlrun-pytorchjob.yaml", ["dlrun-resnet50-worker-0"], True))
    with tempfile.TemporaryDirectory(prefix="dlrun-k8s-") as tmp:
        try:
            reference = None
            for file, names, elastic in cases:
                specs = [command_of(c, added, names) for c, added in pods(manifest(file))]
                if reference is None:  # an uninterrupted run of two pods, once
                    dirs = scratch_dirs(tmp, "whole")
                    codes, out = run_pods(img, f"dlrun-k8s-whole-{os.getpid()}", specs, dirs)
                    expect(codes == [0, 0], f"the uninterrupted run: exits {codes}\n" + "\n".join(out))
                    reference = summary(dirs[0])["params_sha256"]
                label = file.split(".")[0]
                dirs = scratch_dirs(tmp, label)
                if elastic:  # the job goes on: pod 0 waits for pod 1's restarted container
                    codes, out = run_pods(img, f"{label}-{os.getpid()}", specs, dirs, stop_one=True, elastic=True)
                    expect(codes == [0, 0], f"{file}: exits {codes} after pod 1's restart\n" + "\n".join(out))
                    stopped = {"steps": "a checkpoint"}
                else:  # every pod exits 75; the controller starts both again
                    codes, out = run_pods(img, f"{label}-{os.getpid()}", specs, dirs, stop_one=True)
                    expect(codes == [75, 75], f"{file}: pod 1 stopped as the kubelet does, exits {codes}, not 75 and "
                           f"75\n" + "\n".join(out))
                    stopped = summary(dirs[0])
                    expect(stopped["status"] == "interrupted" and stopped["checkpoint"], stopped)
                    codes, out = run_pods(img, f"{label}-again-{os.getpid()}", specs, dirs)
                    expect(codes == [0, 0], f"{file}: the restarted pods exit {codes}\n" + "\n".join(out))
                resumed = summary(dirs[0])
                expect(resumed["resumed_from_step"] > 0 and resumed["params_sha256"] == reference,
                       f"{file}: resumed from {resumed['resumed_from_step']} to {resumed['params_sha256']}, "
                       f"not the uninterrupted {reference}")
                what = ("pod 1 stopped (75) and restarted, pod 0's launcher waiting for it in a new round" if elastic
                        else f"pod 1 stopped at step {stopped['steps']}, both exited 75, both restarted")
                print(f"  {file}: {what}; resumed from {resumed['resumed_from_step']} to the uninterrupted "
                      f"params_sha256 {reference[:16]}")
        finally:
            subprocess.run(["chown", "-R", f"{os.getuid()}:{os.getgid()}", tmp], capture_output=True)
            if not os.environ.get("DLRUN_IMAGE"):
                subprocess.run(["podman", "rmi", "-f", img], capture_output=True)


if __name__ == "__main__":
    sys.exit(main([test_each_manifest_stops_with_75_and_resumes_exactly]))
