"""The deployment recipes of docs/distributed.md: the Slurm batch script and the two-host script
parse (bash -n); the batch script passes SIGUSR1 on to srun and requeues on exit 75 only (run
with stand-ins for srun and scontrol); the Kubernetes manifest is valid YAML with the Indexed
Job, the grace period, the failure policy and the launcher arguments the page describes; the
page names every recipe, and every file it names exists. No cluster, GPU or network needed."""
import os
import re
import signal
import subprocess
import tempfile
import shutil
import time

import yaml

from common import SRC, expect, main

DOC = os.path.join(SRC, "docs", "distributed.md")
SBATCH = os.path.join(SRC, "examples", "slurm", "dlrun.sbatch")
TWO_HOSTS = os.path.join(SRC, "examples", "two-hosts.sh")
K8S = os.path.join(SRC, "examples", "k8s", "dlrun-indexed-job.yaml")
RECIPES = ("examples/slurm/dlrun.sbatch", "examples/k8s/dlrun-indexed-job.yaml", "examples/two-hosts.sh")


def read(path):
    with open(path) as f:
        return f.read()


def bash_n(path):
    p = subprocess.run(["bash", "-n", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    expect(p.returncode == 0, f"bash -n {path}: {p.stdout}")


# ---- Slurm --------------------------------------------------------------------------------

def sbatch_options():
    """The #SBATCH options, in order (sbatch reads them up to the first command)."""
    opts = []
    for line in read(SBATCH).splitlines():
        if line.startswith("#SBATCH"):
            opts += line.split()[1:]
        elif line.strip() and not line.startswith("#"):
            break
    return opts


def test_sbatch_parses_and_has_the_preemption_options():
    bash_n(SBATCH)
    opts = sbatch_options()
    expect(any(re.fullmatch(r"--signal=B:USR1@\d+", o) for o in opts), f"no --signal=B:USR1@<s> in {opts}")
    expect("--requeue" in opts, f"no --requeue in {opts}")
    expect("--open-mode=append" in opts, f"the log of a requeued job would be truncated: {opts}")
    expect(any(o.startswith("--ntasks-per-node=") for o in opts), "no --ntasks-per-node (one rank per GPU)")
    expect(not any(o.startswith("--gpus-per-task") for o in opts), "per-task GPUs hide cuda:LOCAL_RANK")
    text = read(SBATCH)
    expect(re.search(r'"\$code" -eq 75', text) and "scontrol requeue" in text, "exit 75 does not requeue")
    expect("trap forward_usr1 USR1" in text, "SIGUSR1 is not trapped")


STUB_SRUN = r"""#!/bin/bash
# srun stand-in: records its arguments and environment, then runs until SIGUSR1 or exits at once.
printf '%s\n' "$@" > "$STUB/srun.args"
echo "$MASTER_ADDR:$MASTER_PORT ${RANK-unset}" > "$STUB/srun.env"
trap 'echo USR1 >> "$STUB/srun.signals"; exit "${STUB_EXIT_ON_USR1:-75}"' USR1
trap 'echo TERM >> "$STUB/srun.signals"' TERM
touch "$STUB/srun.started"
if [ -n "${STUB_EXIT:-}" ]; then exit "$STUB_EXIT"; fi
for _ in $(seq 1 600); do sleep 0.05; done
exit 99
"""

STUB_SCONTROL = r"""#!/bin/bash
# scontrol stand-in: the first host of the node list; records requeues.
case "$1 $2" in
  "show hostnames") echo node017; echo node018 ;;
  *) echo "$*" >> "$STUB/scontrol.calls" ;;
esac
"""


class Batch:
    """examples/slurm/dlrun.sbatch run by bash outside Slurm, with srun and scontrol stand-ins."""

    def __init__(self, **env):
        self.dir = tempfile.mkdtemp(prefix="dlrun-sbatch-test-")
        bin_dir = os.path.join(self.dir, "bin")
        os.mkdir(bin_dir)
        for name, text in (("srun", STUB_SRUN), ("scontrol", STUB_SCONTROL)):
            path = os.path.join(bin_dir, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], STUB=self.dir,
                        SLURM_JOB_ID="4242", SLURM_JOB_NAME="dlrun", SLURM_JOB_NODELIST="node[017-018]",
                        SLURM_SUBMIT_DIR=self.dir, SLURM_JOB_NUM_NODES="2", RANK="3")  # RANK: a leftover
        for name in ("MASTER_ADDR", "MASTER_PORT", "DLRUN", "RUN_DIR", "SLURM_RESTART_COUNT"):
            self.env.pop(name, None)  # the script's defaults are under test
        self.env.update(env)
        self.proc = subprocess.Popen(["bash", SBATCH, "configs/imagenet/resnet50.yaml", "optim.lr=1.6"],
                                     env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)

    def file(self, name):
        path = os.path.join(self.dir, name)
        return read(path) if os.path.exists(path) else ""

    def wait_started(self):
        deadline = time.time() + 20
        while not os.path.exists(os.path.join(self.dir, "srun.started")):
            expect(self.proc.poll() is None, f"the batch script exited early ({self.proc.returncode})")
            expect(time.time() < deadline, "srun was not started")
            time.sleep(0.02)

    def finish(self):
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
            raise AssertionError("the batch script did not exit")
        return self.proc.returncode, out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_sbatch_forwards_usr1_and_requeues_on_75():
    with Batch() as b:
        b.wait_started()
        b.proc.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@120 does
        code, out = b.finish()
        expect(code == 75, f"exit {code}, expected 75:\n{out}")
        expect(b.file("srun.signals").split() == ["USR1"], f"srun got {b.file('srun.signals')!r}, expected one USR1")
        expect(b.file("scontrol.calls").split() == ["requeue", "4242"], f"scontrol calls: {b.file('scontrol.calls')!r}")
        expect(b.file("srun.env").split() == ["node017:29500", "unset"], f"srun's environment: {b.file('srun.env')!r}")
        args = b.file("srun.args").splitlines()
        expect("--kill-on-bad-exit=0" in args, args)
        i = args.index("train")
        expect(args[i - 1] == os.path.join(b.dir, "build", "dlrun"), f"binary: {args[i - 1]}")
        run_dir = os.path.join(b.dir, "runs", "dlrun-4242")  # the job id survives a requeue
        expect(args[i + 1:i + 4] == ["configs/imagenet/resnet50.yaml", "--run-dir", run_dir], args)
        expect(args[-1] == "optim.lr=1.6", args)


def test_sbatch_never_forwards_sigterm():
    with Batch(STUB_EXIT_ON_USR1="75") as b:
        b.wait_started()
        b.proc.send_signal(signal.SIGTERM)  # scancel / the time limit: Slurm signals srun itself
        time.sleep(0.3)
        expect(b.proc.poll() is None, "the batch shell died on SIGTERM")
        expect(b.file("srun.signals") == "", f"SIGTERM was forwarded to srun: {b.file('srun.signals')!r}")
        b.proc.send_signal(signal.SIGUSR1)
        code, out = b.finish()
        expect(code == 75 and b.file("srun.signals").split() == ["USR1"], f"exit {code}:\n{out}")


def test_sbatch_requeues_only_on_75():
    for exit_code in (0, 1, 2):
        with Batch(STUB_EXIT=str(exit_code)) as b:
            code, out = b.finish()
            expect(code == exit_code, f"srun exit {exit_code}, batch exit {code}:\n{out}")
            expect(b.file("scontrol.calls") == "", f"srun exit {exit_code} requeued: {b.file('scontrol.calls')!r}")


def test_two_hosts_parses():
    bash_n(TWO_HOSTS)
    text = read(TWO_HOSTS)
    expect(re.search(r"exec scripts/dlrun-launch", text), "the script does not exec the launcher")
    for flag in ("--nnodes 2", '--node-rank "$NODE_RANK"', '--master-addr "$MASTER_ADDR"',
                 '--master-port "$MASTER_PORT"'):
        expect(flag in text, f"{flag} missing")


# ---- Kubernetes ---------------------------------------------------------------------------

def k8s_docs():
    with open(K8S) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = [d.get("kind") for d in docs]
    expect(kinds.count("Job") == 1 and kinds.count("Service") == 1, f"kinds: {kinds}")
    return next(d for d in docs if d["kind"] == "Service"), next(d for d in docs if d["kind"] == "Job")


def arg_after(args, flag):
    expect(flag in args, f"{flag} not in {args}")
    return args[args.index(flag) + 1]


def test_k8s_manifest():
    svc, job = k8s_docs()
    expect(job["apiVersion"] == "batch/v1" and svc["apiVersion"] == "v1", (job["apiVersion"], svc["apiVersion"]))
    spec = job["spec"]
    name, svc_name = job["metadata"]["name"], svc["metadata"]["name"]
    expect(spec["completionMode"] == "Indexed", spec.get("completionMode"))
    expect(spec["completions"] == spec["parallelism"], "every pod must run at once")
    pod = spec["template"]["spec"]

    # rank 0's address: the headless Service names the pods <job>-<index>.<service>
    expect(svc["spec"].get("clusterIP") == "None", "the Service is not headless")
    expect(svc["spec"]["selector"] in ({"job-name": name}, {"batch.kubernetes.io/job-name": name}),
           f"the Service does not select the Job's pods: {svc['spec']['selector']}")
    expect(pod.get("subdomain") == svc_name, f"subdomain {pod.get('subdomain')} != Service {svc_name}")

    grace = pod["terminationGracePeriodSeconds"]
    expect(grace > 120, f"terminationGracePeriodSeconds {grace} <= 120")

    # exit 75 is retried without counting as a failure; podFailurePolicy needs restartPolicy Never
    expect(pod["restartPolicy"] == "Never", pod["restartPolicy"])
    containers = pod["containers"]
    expect(len(containers) == 1, [c["name"] for c in containers])
    c = containers[0]
    rules = spec["podFailurePolicy"]["rules"]
    on75 = [r for r in rules if 75 in r.get("onExitCodes", {}).get("values", [])]
    expect(len(on75) == 1, f"no single podFailurePolicy rule for exit code 75: {rules}")
    r = on75[0]
    expect(r["onExitCodes"]["operator"] == "In" and r["action"] in ("Ignore", "Count"), r)
    expect(r["onExitCodes"].get("containerName", c["name"]) == c["name"], r)
    expect(any(p.get("type") == "DisruptionTarget" and rule["action"] == "Ignore"
               for rule in rules for p in rule.get("onPodConditions", [])), f"disruptions count as failures: {rules}")

    gpus = int(c["resources"]["limits"]["nvidia.com/gpu"])
    expect(gpus == 8, gpus)
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    expect(env.get("MASTER_ADDR", "").split(".")[:2] == [f"{name}-0", svc_name],
           f"MASTER_ADDR {env.get('MASTER_ADDR')} is not pod 0 through the Service")
    expect("MASTER_PORT" in env, "no MASTER_PORT")

    # the launcher is the main process (no shell that would swallow SIGTERM) ...
    argv = [*c["command"], *c.get("args", [])]
    expect(argv[0].endswith("dlrun-launch"), f"the container runs {argv[0]}, not dlrun-launch")
    expect(not any(a in ("sh", "bash", "-c") for a in c["command"]), c["command"])
    launcher, program = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    # ... with the node rank from the completion index and the layout of the Job
    expect(arg_after(launcher, "--node-rank") == "$(JOB_COMPLETION_INDEX)", launcher)
    expect(arg_after(launcher, "--master-addr") == "$(MASTER_ADDR)", launcher)
    expect(arg_after(launcher, "--master-port") == "$(MASTER_PORT)", launcher)
    expect(int(arg_after(launcher, "--nnodes")) == spec["completions"], "--nnodes != completions")
    expect(int(arg_after(launcher, "--nproc-per-node")) == gpus, "--nproc-per-node != GPUs per pod")
    # ... and a stop that fits in the grace period
    shutdown = float(arg_after(launcher, "--shutdown-timeout"))
    expect(shutdown < grace, f"--shutdown-timeout {shutdown} >= grace {grace}")
    overrides = dict(a.split("=", 1) for a in program if "=" in a and not a.startswith("-"))
    expect(program[0].endswith("dlrun") and program[1] == "train", program)
    expect(float(overrides.get("preemption.deadline_s", "inf")) < shutdown,
           "preemption.deadline_s >= --shutdown-timeout")
    expect(overrides.get("checkpoint.remote", "").startswith("s3://")
           or any(v.get("persistentVolumeClaim") for v in pod.get("volumes", [])), "checkpoints die with the pod")
    expect(any(v.get("emptyDir", {}).get("medium") == "Memory" and m["mountPath"] == "/dev/shm"
               for v in pod["volumes"] for m in c["volumeMounts"] if m["name"] == v["name"]), "no /dev/shm volume")


def pod_failure_action(rules, container, exit_code, conditions=()):
    """What the Job controller does with a failed pod under podFailurePolicy (batch/v1): the first
    rule that matches decides (Ignore, Count, FailJob, FailIndex); none matching counts the
    failure against backoffLimit. onExitCodes looks at the named container's non-zero exit code;
    onPodConditions at the pod's conditions with status True."""
    for rule in rules:
        codes = rule.get("onExitCodes")
        if codes is not None:
            named = codes.get("containerName")
            if exit_code != 0 and (named is None or named == container):
                inside = exit_code in codes["values"]
                if inside == (codes["operator"] == "In"):
                    return rule["action"]
        for pattern in rule.get("onPodConditions", []):
            if pattern["type"] in conditions:
                return rule["action"]
    return "Count"


def test_k8s_job_requeues_on_75_and_gives_up_on_failures():
    """The manifest's podFailurePolicy evaluated as the Job controller does, on the exit codes the
    pods' dlrun-launch returns (tests/e2e/test_exit75.py: a stop with a committed checkpoint is 75
    on every rank; rank 0 unable to commit it is 1 on every rank)."""
    _, job = k8s_docs()
    rules = job["spec"]["podFailurePolicy"]["rules"]
    container = job["spec"]["template"]["spec"]["containers"][0]["name"]
    backoff = job["spec"].get("backoffLimit", 6)

    def incident(codes, conditions=()):
        return [pod_failure_action(rules, container, c, conditions) for c in codes]

    # Preempted any number of times: never counted, the pods are replaced and resume.
    expect(all(a == "Ignore" for _ in range(50) for a in incident([75, 75])), incident([75, 75]))
    expect(incident([137, 137], ["DisruptionTarget"]) == ["Ignore", "Ignore"], "a drained node counts")
    # Rank 0's save fails on every try: each incident counts, and the Job fails after backoffLimit.
    counted, incidents = 0, 0
    while counted <= backoff and incidents < 100:
        actions = incident([1, 1])
        expect(set(actions) <= {"Count", "FailJob", "FailIndex"}, f"a failure is ignored: {actions}")
        counted += len(actions) if "FailJob" in actions else actions.count("Count")
        incidents += 1
    expect(incidents <= backoff + 1, f"{incidents} incidents before the Job failed")
    expect(pod_failure_action(rules, "sidecar", 75) == "Count", "exit 75 of another container is ignored")


# ---- the page -----------------------------------------------------------------------------

def test_doc_names_the_recipes_and_they_exist():
    text = read(DOC)
    for recipe in RECIPES:
        expect(recipe in text, f"docs/distributed.md does not mention {recipe}")
    named = set(re.findall(r"\b((?:examples|docs|configs|scripts|bench)/[\w./-]*\w)", text))
    expect(set(RECIPES) <= named, named)
    missing = sorted(p for p in named if not os.path.exists(os.path.join(SRC, p)))
    expect(not missing, f"docs/distributed.md names files that do not exist: {missing}")
    for recipe in RECIPES:  # each recipe points back at the page
        expect("docs/distributed.md" in read(os.path.join(SRC, recipe)), f"{recipe} does not name docs/distributed.md")
    readme = read(os.path.join(SRC, "README.md"))
    expect("docs/distributed.md" in readme, "README.md does not link docs/distributed.md")


if __name__ == "__main__":
    main([
        test_sbatch_parses_and_has_the_preemption_options,
        test_sbatch_forwards_usr1_and_requeues_on_75,
        test_sbatch_never_forwards_sigterm,
        test_sbatch_requeues_only_on_75,
        test_two_hosts_parses,
        test_k8s_manifest,
        test_k8s_job_requeues_on_75_and_gives_up_on_failures,
        test_doc_names_the_recipes_and_they_exist,
    ])
