"""A real single-node Slurm on this machine for the tests: Debian's munged, slurmctld and slurmd,
configured in a temporary directory (their own munge key and socket, state, spool, logs and
ports; nothing under /etc touched), started by `with SlurmCluster() as c:` and stopped after,
every job cancelled first. sbatch, scontrol and squeue are pointed at it through SLURM_CONF."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

from s3_server import free_port  # noqa: F401 - also test_slurm's


CONF = """ClusterName=dlrun-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
JobRequeue=1
InactiveLimit=0
KillWait=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    def __enter__(self):
        for tool in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is not installed (scripts/setup.sh installs munge, slurmctld, slurmd "
                                   "and slurm-client)")
        self.dir = tempfile.mkdtemp(prefix="dlrun-slurm-")  # 0700, as munged wants
        os.makedirs(os.path.join(self.dir, "state"))
        os.makedirs(os.path.join(self.dir, "spool"))
        key = os.path.join(self.dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.host = socket.gethostname().split(".")[0]
        self.conf = os.path.join(self.dir, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(CONF.format(host=self.host, dir=self.dir, ctld_port=free_port(), d_port=free_port(),
                                cpus=os.cpu_count() or 1))
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.procs = []
        try:
            self._start(["munged", "-F", "--force", f"--socket={self.dir}/munge.sock", f"--key-file={key}",
                         f"--log-file={self.dir}/munged.log", f"--pid-file={self.dir}/munged.pid",
                         f"--seed-file={self.dir}/munged.seed"])
            self._wait(lambda: os.path.exists(f"{self.dir}/munge.sock"), "munged")
            self._start(["slurmctld", "-D", "-i", "-f", self.conf])
            self._wait(lambda: self.run("scontrol", "ping").returncode == 0, "slurmctld")
            self._start(["slurmd", "-D", "-f", self.conf])
            self._wait(lambda: "idle" in self.run("sinfo", "-h", "-o", "%T").stdout, "slurmd (node idle)")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self, cmd):
        log = open(os.path.join(self.dir, os.path.basename(cmd[0]) + ".out"), "w")
        self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL))

    def _wait(self, cond, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{what} did not start; logs in {self.dir}:\n{self.logs()}")

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out.append(f"--- {name}\n" + f.read()[-3000:])
        return "\n".join(out)

    def run(self, *cmd, env=None):
        return subprocess.run(list(cmd), env=dict(self.env, **(env or {})), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)

    def sbatch(self, *args, env=None, cwd=None):
        """Submit; return the job id."""
        p = subprocess.run(["sbatch", "--parsable", *args], env=dict(self.env, **(env or {})), cwd=cwd,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"sbatch failed ({p.returncode}): {p.stdout}")
        return p.stdout.strip().split(";")[0]

    def job(self, job_id):
        """scontrol's fields of the job (JobState, Restarts, ExitCode, Reason, ...)."""
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        fields = {}
        for item in out.split():
            if "=" in item:
                k, v = item.split("=", 1)
                fields.setdefault(k, v)
        return fields

    def wait_job(self, job_id, cond, timeout=300):
        """Poll the job until cond(fields) holds; the last fields. A requeued job that Slurm holds
        back (BeginTime: it delays a requeued job's start by two minutes) is made eligible now,
        as the scheduler would after its delay."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.job(job_id)
            if cond(j):
                return j
            if j.get("JobState") == "PENDING" and j.get("Reason") == "BeginTime":
                self.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
            time.sleep(0.3)
        raise AssertionError(f"job {job_id}: condition not reached in {timeout} s: {self.job(job_id)}\n{self.logs()}")

    def __exit__(self, *exc):
        if shutil.which("scancel") and any(p.poll() is None for p in self.procs):
            subprocess.run(["scancel", "--user=root"], env=self.env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30)
            deadline = time.time() + 45  # the jobs' processes end (KillWait) before slurmd does
            while time.time() < deadline and self.run("squeue", "-h").stdout.strip():
                time.sleep(0.5)
        for p in reversed(self.procs):  # slurmd, slurmctld, munged
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if not os.environ.get("DLRUN_KEEP_TMP"):
            shutil.rmtree(self.dir, ignore_errors=True)
