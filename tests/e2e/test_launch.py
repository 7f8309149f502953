"""scripts/dlrun-launch, the torchrun-style launcher, with fake workers (fake_worker.py) instead of
the dlrun binary: the environment of each rank, prefixed output, combined exit codes, forwarded
signals, the SIGKILL after --shutdown-timeout, restarts that resume, bare subcommands, usage
errors, the run id, --standalone and a taken port; and, with the dlrun binary, two jobs on one
port. Every test stops every process it started (launcher and workers) and removes its files."""
import errno
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from common import DLRUN, SRC, RunDir, cfg, expect, main

LAUNCH = os.path.join(SRC, "scripts", "dlrun-launch")
FAKE = os.path.join(SRC, "tests", "e2e", "fake_worker.py")
PY = sys.executable
TIMEOUT = 60  # no launcher run here should come near this, even on a loaded machine
# A short real training run: the dlrun tests here are about the rendezvous, not the model.
TRAIN = ("train", cfg("tiny.yaml"), "model.name=mlp", "model.hidden=[32]", "train.max_steps=5", "run.threads=1",
         "log.progress=none")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Listener:
    """A socket listening on host:port (port 0: a free one), as another job's rendezvous store would;
    `port` None when that port could not be taken (something else holds it: just as good)."""

    def __init__(self, port=0, host="127.0.0.1"):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
            self.sock.listen()
            self.port = self.sock.getsockname()[1]
        except OSError as e:
            expect(e.errno == errno.EADDRINUSE, f"binding {host}:{port}: {e}")
            self.port = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()


class Job:
    """One dlrun-launch run in a temporary directory; `command` defaults to the fake worker.

    On exit the launcher and every worker still alive (found by the FAKE_OUT_DIR in their
    environment) get SIGKILL; workers left behind by a launcher that exited by itself fail the test."""

    def __init__(self, *options, command=("--", PY, FAKE), mode="ok", env=None, default_port=False):
        self.dir = tempfile.mkdtemp(prefix="dlrun-launch-test-")
        self.out_dir = os.path.join(self.dir, "out")
        os.mkdir(self.out_dir)
        # A free port unless the test names one (or wants the default): the launcher checks that
        # the port is free, and 29500 may be some other job's on this machine.
        if not default_port and not {"--master-port", "--standalone"} & set(options):
            options = (*options, "--master-port", str(free_port()))
        self.args = [PY, LAUNCH, *options, *command]
        self.env = dict(os.environ, FAKE_OUT_DIR=self.out_dir, FAKE_MODE=mode)
        for name in ("OMP_NUM_THREADS", "TORCHELASTIC_RUN_ID", "FAKE_LINES", "DLRUN_FAULT"):
            self.env.pop(name, None)  # the tests set these explicitly where they matter
        self.env.update(env or {})
        self.proc = None
        self.out = self.err = ""

    def __enter__(self):
        return self

    def start(self):
        # Its own process group, as a shell job would be: os.killpg then plays a terminal's Ctrl-C.
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        return self

    def finish(self, timeout=TIMEOUT):
        self.out, self.err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode

    def run(self):
        return self.start().finish()

    def records(self):
        """(rank, restart) -> what that worker recorded."""
        recs = {}
        for path in glob.glob(os.path.join(self.out_dir, "rank*-restart*.json")):
            rank, restart = re.fullmatch(r"rank(\d+)-restart(\d+)\.json", os.path.basename(path)).groups()
            with open(path) as f:
                recs[int(rank), int(restart)] = json.load(f)
        return recs

    def wait_for_workers(self, n, timeout=60):
        """Wait until n workers of the first attempt have their signal handlers in place."""
        deadline = time.time() + timeout
        while len(self.records()) < n:
            expect(self.proc.poll() is None, f"the launcher exited early ({self.proc.returncode})")
            expect(time.time() < deadline, f"{len(self.records())} of {n} workers started")
            time.sleep(0.02)

    def leftovers(self):
        """Pids of live processes started for this job (they carry its FAKE_OUT_DIR)."""
        marker = f"FAKE_OUT_DIR={self.out_dir}".encode()
        pids = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        pids.append(int(entry))
            except (OSError, ValueError):
                pass  # not a process, gone, or not ours
        return pids

    def __exit__(self, exc_type, *_):
        exited_by_itself = self.proc is None or self.proc.poll() is not None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        left = self.leftovers()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        if exc_type is None and exited_by_itself:
            expect(not left, f"the launcher left workers running: {left}")

    def log(self):
        return f"\n--- stdout:\n{self.out[-3000:]}\n--- stderr:\n{self.err[-3000:]}"


def fake_dlrun(directory):
    """An executable `dlrun` in `directory` that runs the fake worker, marking that it went through it."""
    path = os.path.join(directory, "dlrun")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nexport FAKE_VIA_WRAPPER=1\nexec {shlex.quote(PY)} {shlex.quote(FAKE)} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def test_env_of_every_worker():
    with Job("--nproc-per-node", "2", default_port=True) as j:  # (29500 must be free here)
        expect(j.run() == 0, j.log())
        recs = j.records()
        expect(sorted(recs) == [(0, 0), (1, 0)], sorted(recs))
        threads = str(max(1, os.cpu_count() // 2))
        run_id = recs[0, 0]["env"]["TORCHELASTIC_RUN_ID"]
        expect(re.fullmatch(r"[0-9a-f]{16}", run_id or ""), f"run id {run_id!r}: not one made for this launch")
        for rank in (0, 1):
            r = recs[rank, 0]
            expect(r["env"] == {
                "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                "GROUP_RANK": "0", "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": run_id, "OMP_NUM_THREADS": threads,
                "FAKE_VIA_WRAPPER": None}, r["env"])
            expect(r["sid"] == r["pid"], f"rank {rank} does not run in its own session")
        expect(re.search(r"^dlrun-launch: nnodes 1, node-rank 0, nproc-per-node 2, world size 2, "
                         rf"master 127\.0\.0\.1:29500, run id {run_id}, command: ", j.err, re.M), j.log())
        expect(re.search(rf"^dlrun-launch: OMP_NUM_THREADS .*\b{threads}\b", j.err, re.M), j.log())


def test_env_on_the_second_node():
    with Job("--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-addr", "10.1.2.3",
             "--master-port", "1234", "--max-restarts", "3",
             env={"OMP_NUM_THREADS": "5", "TORCHELASTIC_RUN_ID": "job7"}) as j:
        expect(j.run() == 0, j.log())
        recs = j.records()
        expect(sorted(recs) == [(2, 0), (3, 0)], sorted(recs))
        for rank, local in ((2, 0), (3, 1)):
            e = recs[rank, 0]["env"]
            expect((e["RANK"], e["LOCAL_RANK"], e["ROLE_RANK"]) == (str(rank), str(local), str(rank)), e)
            sizes = (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["ROLE_WORLD_SIZE"], e["GROUP_RANK"])
            expect(sizes == ("4", "2", "4", "1"), e)
            expect((e["MASTER_ADDR"], e["MASTER_PORT"]) == ("10.1.2.3", "1234"), e)
            expect((e["TORCHELASTIC_RESTART_COUNT"], e["TORCHELASTIC_MAX_RESTARTS"]) == ("0", "3"), e)
            expect((e["OMP_NUM_THREADS"], e["TORCHELASTIC_RUN_ID"]) == ("5", "job7"), e)
        expect("OMP_NUM_THREADS" not in j.err, f"OMP_NUM_THREADS was set already:{j.log()}")


def test_torchrun_variables_as_a_pytorchjob_sets_them():
    """torchrun's PET_* variables (a Kubeflow PyTorchJob's pod has them) stand for the options; an
    option on the command line wins; a bad value is refused naming its variable."""
    pet = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "2", "PET_MASTER_ADDR": "10.1.2.3",
           "PET_MAX_RESTARTS": "3", "PET_RDZV_ID": "job9"}
    with Job(env=pet) as j:  # (Job gives --master-port on the command line: it wins over none here)
        expect(j.run() == 0, j.log())
        recs = j.records()
        expect(sorted(recs) == [(2, 0), (3, 0)], sorted(recs))
        e = recs[2, 0]["env"]
        expect((e["WORLD_SIZE"], e["GROUP_RANK"], e["MASTER_ADDR"], e["TORCHELASTIC_MAX_RESTARTS"],
                e["TORCHELASTIC_RUN_ID"]) == ("4", "1", "10.1.2.3", "3", "job9"), e)
    with Job("--nproc-per-node", "1", env=pet) as j:  # the command line over PET_NPROC_PER_NODE
        expect(j.run() == 0, j.log())
        expect(sorted(j.records()) == [(1, 0)], sorted(j.records()))
    # An elastic PyTorchJob's: the endpoint is the master, and PET_NODE_RANK is not used.
    port = free_port()
    with Job("--nproc-per-node", "1", default_port=True,
             env={"PET_NNODES": "1:2", "PET_NODE_RANK": "0", "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
                  "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ID": "elastic7",
                  "PET_RDZV_CONF": "join_timeout=30,last_call_timeout=0.5"}) as j:
        expect(j.run() == 0, j.log())
        e = j.records()[0, 0]["env"]
        expect((e["MASTER_ADDR"], e["TORCHELASTIC_RUN_ID"]) == ("127.0.0.1", "elastic7"), e)
        expect(re.search(rf"127\.0\.0\.1:{port}", j.err), j.log())
    for env, message in (({"PET_NNODES": "two"}, "--nnodes 'two': expected a number N or a range MIN:MAX (from "
                                                 "$PET_NNODES)"),
                         ({"PET_MASTER_PORT": "x"}, "$PET_MASTER_PORT 'x': --master-port takes a whole number"),
                         ({"PET_RDZV_BACKEND": "etcd"}, "$PET_RDZV_BACKEND 'etcd': the launcher's rendezvous")):
        with Job(env=env) as j:
            expect(j.run() == 2 and message in j.err, j.log())


def test_the_run_id():
    """torchrun's --rdzv-id: the option, else $TORCHELASTIC_RUN_ID, else a fresh one on one node and
    "none" on several (whose launchers could not agree on a random one); the same for every rank."""
    def run_ids(*options, env=None):
        with Job("--nproc-per-node", "2", *options, env=env) as j:
            expect(j.run() == 0, j.log())
            ids = {r["env"]["TORCHELASTIC_RUN_ID"] for r in j.records().values()}
            expect(len(ids) == 1 and len(j.records()) == 2, f"{options}: ranks with run ids {ids}")
            return ids.pop()
    first, second = run_ids(), run_ids()
    expect(first != second and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in (first, second)), (first, second))
    expect(run_ids("--rdzv-id", "exp-7") == "exp-7", "--rdzv-id is not passed on")
    expect(run_ids("--rdzv-id", "exp-7", env={"TORCHELASTIC_RUN_ID": "job7"}) == "exp-7", "the option comes first")
    expect(re.fullmatch(r"[0-9a-f]{16}", run_ids(env={"TORCHELASTIC_RUN_ID": "none"})), "'none' is no run id")
    for node in ("0", "1"):
        expect(run_ids("--nnodes", "2", "--node-rank", node) == "none", f"node {node} of 2 without --rdzv-id")
        expect(run_ids("--nnodes", "2", "--node-rank", node, "--rdzv-id", "exp-7") == "exp-7", f"node {node} of 2")
    for bad in ("", "a b", "x" * 129):
        with Job("--rdzv-id", bad) as j:
            expect(j.run() == 2 and "--rdzv-id" in j.err and not j.records(), f"--rdzv-id {bad!r}{j.log()}")


def test_a_port_in_use_is_refused_with_a_way_out():
    """Node 0's launcher checks MASTER_PORT before starting anything: rank 0 could not host the store
    there, and the others would reach the job that holds it."""
    for host in ("127.0.0.1", "0.0.0.0"):
        with Listener(host=host) as other:
            with Job("--nproc-per-node", "2", "--master-port", str(other.port)) as j:
                code = j.run()
                expect(code == 2 and not j.records(), f"{host}: exit {code}{j.log()}")
                expect(re.search(rf"port {other.port} on 127\.0\.0\.1 is in use", j.err), j.log())
                expect("--master-port" in j.err and "--standalone" in j.err, f"no way out named:{j.log()}")
            # Another node's launcher does not host the store: nothing to check there.
            with Job("--nnodes", "2", "--node-rank", "1", "--master-port", str(other.port)) as j:
                expect(j.run() == 0 and sorted(j.records()) == [(1, 0)], j.log())


def test_standalone_picks_a_free_port_and_a_fresh_run_id():
    with Listener(29500):  # the default port taken (or already busy: as good)
        ports = set()
        for _ in range(2):
            with Job("--standalone", "--nproc-per-node", "2") as j:
                expect(j.run() == 0, j.log())
                envs = [r["env"] for r in j.records().values()]
                expect(len(envs) == 2 and len({(e["MASTER_PORT"], e["TORCHELASTIC_RUN_ID"]) for e in envs}) == 1,
                       envs)
                e = envs[0]
                expect(e["MASTER_ADDR"] == "127.0.0.1" and e["MASTER_PORT"] != "29500", e)
                expect(re.fullmatch(r"[0-9a-f]{16}", e["TORCHELASTIC_RUN_ID"]), e)
                line = f"master 127.0.0.1:{e['MASTER_PORT']} (standalone), run id {e['TORCHELASTIC_RUN_ID']}"
                expect(line in j.err, j.log())
                ports.add((e["MASTER_PORT"], e["TORCHELASTIC_RUN_ID"]))
        expect(len(ports) == 2, f"two standalone launches, one port and run id: {ports}")
        with Job("--standalone", "--rdzv-id", "mine") as j:
            expect(j.run() == 0 and j.records()[0, 0]["env"]["TORCHELASTIC_RUN_ID"] == "mine", j.log())
        # And a real dlrun job trains on the port it was given.
        with RunDir() as r, Job("--standalone", "--nproc-per-node", "2",
                                command=["--", DLRUN, *TRAIN, "--run-dir", r.path]) as j:
            expect(j.run() == 0, j.log())
            expect(r.summary()["world_size"] == 2, r.summary())


def test_standalone_is_one_node_on_a_port_of_its_own():
    for options in (["--nnodes", "2"], ["--master-addr", "10.0.0.1"], ["--master-port", "1234"]):
        with Job("--standalone", *options) as j:
            code = j.run()
            expect(code == 2 and f"not with {options[0]}" in j.err and not j.records(),
                   f"{options}: exit {code}{j.log()}")


def test_a_worker_that_reaches_another_jobs_store_exits_2_and_that_job_goes_on():
    """The report: job A's rank 0 holds the port; job B's rank 1 (a second node's launcher, which
    has no port of its own to check) reached A's store and joined A's rendezvous. Now it exits 2 at
    once, naming both jobs, and A, untouched, trains when its own rank 1 arrives."""
    port = str(free_port())
    a_env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=port, TORCHELASTIC_RUN_ID="job-a")
    a_env.pop("DLRUN_FAULT", None)
    with RunDir() as ra, RunDir() as rb:
        a0 = subprocess.Popen([DLRUN, *TRAIN, "dist.timeout_s=60", "--run-dir", ra.path], env=a_env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        a1 = None
        try:
            deadline = time.time() + 30
            while True:  # until A's rank 0 hosts its store
                expect(a0.poll() is None, f"job A's rank 0 exited {a0.returncode}")
                expect(time.time() < deadline, "job A's rank 0 did not host its store")
                try:
                    socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            start = time.time()
            with Job("--nnodes", "2", "--node-rank", "1", "--master-port", port, "--rdzv-id", "job-b",
                     command=["--", DLRUN, *TRAIN, "dist.timeout_s=60", "--run-dir", rb.path]) as b:
                code = b.run()
                took = time.time() - start
                expect(code == 2 and "rank 1 failed (exit code 2)" in b.err, f"job B: exit {code}{b.log()}")
                expect(took < 30, f"job B's worker took {took:.0f} s to give up")
                text = b.out + b.err
                expect(f"the rendezvous store at 127.0.0.1:{port} belongs to job 'job-a' (2 ranks) but this worker "
                       f"(rank 1) is job 'job-b' (2 ranks)" in text, b.log())
                expect("--master-port" in text and "--standalone" in text, b.log())
            expect(a0.poll() is None, f"job A's rank 0 exited {a0.returncode} when job B's worker came by")
            a1 = subprocess.Popen([DLRUN, *TRAIN, "dist.timeout_s=60", "--run-dir", ra.path],
                                  env=dict(a_env, RANK="1", LOCAL_RANK="0"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            outs = [p.communicate(timeout=TIMEOUT)[0] for p in (a0, a1)]
            expect([a0.returncode, a1.returncode] == [0, 0], "job A:\n" + "\n".join(o[-2000:] for o in outs))
            expect(ra.summary()["world_size"] == 2 and ra.summary()["steps"] == 5, ra.summary())
            expect("run id job-a" in outs[0], outs[0][-2000:])
        finally:
            for p in (a0, a1):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.communicate()


def test_output_is_prefixed_line_by_line():
    lines = 300  # ~35 KB per rank: Python's buffered stdout hands the pipe lines cut in the middle
    with Job("--nproc-per-node", "2", env={"FAKE_LINES": str(lines)}) as j:
        expect(j.run() == 0, j.log())
        seen = {0: [], 1: []}
        for line in j.out.splitlines():
            m = re.fullmatch(r"\[rank (\d)\] (?:line (\d+) of rank \1 x{100}|tail of rank \1)", line)
            expect(m, f"stdout line {line!r}")
            seen[int(m[1])].append(int(m[2]) if m[2] else "tail")
        for rank in (0, 1):
            expect(seen[rank] == [*range(lines), "tail"], f"rank {rank}: stdout lines {seen[rank][:5]}...")
        err = {0: 0, 1: 0}
        for line in j.err.splitlines():
            if line.startswith("dlrun-launch: "):
                continue
            m = re.fullmatch(r"\[rank (\d)\] err \d+ of rank \1", line)
            expect(m, f"stderr line {line!r}")
            err[int(m[1])] += 1
        expect(err == {0: lines, 1: lines}, err)


def test_exit_status_is_combined():
    # A failure beside a worker that committed its checkpoint (exit 75) is an interrupted job: a
    # scheduler requeues it and the run resumes (a worker lost without notice costs one step).
    cases = [("ok", 0, None), ("exit75,ok", 75, None), ("ok,exit75", 75, None), ("exit75", 75, None),
             ("ok,fail", 1, "rank 1 failed (exit code 3)"),
             ("exit75,fail", 75, "the other workers committed a checkpoint: exit 75"),
             ("crash,ok", 1, "rank 0 failed (killed by SIGKILL)"), ("wait_for_signal,bad_input", 2, "refused its input")]
    for mode, code, message in cases:
        with Job("--nproc-per-node", "2", "--shutdown-timeout", "5", mode=mode) as j:
            expect(j.run() == code, f"{mode}: exit {j.proc.returncode}, expected {code}{j.log()}")
            if message:
                expect(message in j.err, f"{mode}: no {message!r}{j.log()}")
            if code == 75:
                expect("requeue" in j.err, j.log())


def test_a_failure_stops_the_other_workers():
    # (rank 0 saves and exits 75 on the SIGTERM: the job's code is 75, a requeue resumes it)
    with Job("--nproc-per-node", "2", mode="wait_for_signal,fail") as j:
        expect(j.run() == 75, j.log())
        recs = j.records()
        expect(recs[0, 0]["signals"] == ["SIGTERM"], recs[0, 0])
        expect("rank 1 failed (exit code 3)" in j.err and "no restart left" in j.err, j.log())
    with Job("--nproc-per-node", "2", mode="fail_on_signal,fail") as j:  # nobody committed: 1
        expect(j.run() == 1, j.log())
        expect("rank 1 failed (exit code 3)" in j.err and "no restart left" in j.err, j.log())


def test_signals_are_forwarded_once():
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        with Job("--nproc-per-node", "2", mode="wait_for_signal") as j:
            j.start()
            j.wait_for_workers(2)
            os.killpg(j.proc.pid, sig)  # the launcher's whole process group, as a terminal would
            code = j.finish()
            expect(code == 75, f"{sig.name}: exit {code}{j.log()}")
            for rank in (0, 1):
                got = j.records()[rank, 0]["signals"]
                expect(got == [sig.name], f"{sig.name}: rank {rank} received {got}")


def test_a_forwarded_signal_reaches_what_a_worker_started():
    """Each worker leads a process group of its own, and a forwarded signal goes to the group: a
    process the worker started (a shell's command, a helper) stops with it, as under torchrun."""
    with Job("--nproc-per-node", "2", mode="with_child") as j:
        j.start()
        j.wait_for_workers(2)
        for rank in (0, 1):
            deadline = time.time() + 30
            while not os.path.exists(os.path.join(j.out_dir, f"child{rank}.signal.ready")):
                expect(time.time() < deadline, f"rank {rank}'s child did not start{j.log()}")
                time.sleep(0.02)
        j.proc.send_signal(signal.SIGTERM)  # the launcher alone, as the kubelet signals a container's main process
        code = j.finish()
        expect(code == 75, f"exit {code}{j.log()}")
        for rank in (0, 1):
            child = os.path.join(j.out_dir, f"child{rank}.signal")
            deadline = time.time() + 10
            while not os.path.exists(child) and time.time() < deadline:
                time.sleep(0.02)
            expect(os.path.exists(child) and open(child).read() == "SIGTERM",
                   f"rank {rank}'s child never received the SIGTERM{j.log()}")


def test_log_files_and_the_root_cause_of_a_failure():
    """--log-dir: each rank's stdout and stderr in files, unprefixed, per attempt; a failed group's
    first failure in the error file (its last stderr lines), also at $TORCHELASTIC_ERROR_FILE."""
    with tempfile.TemporaryDirectory(prefix="dlrun-launch-logs-") as logs:
        with Job("--nproc-per-node", "2", "--log-dir", logs, "--rdzv-id", "job3", mode="ok,fail") as j:
            expect(j.run() == 1, j.log())
            with open(os.path.join(logs, "job3", "attempt_0", "0", "stdout.log")) as f:
                out = f.read()
            expect(out.startswith("line 0 of rank 0 ") and "[rank" not in out and out.endswith("tail of rank 0\n"),
                   out[-300:])
            with open(os.path.join(logs, "job3", "attempt_0", "1", "stderr.log")) as f:
                expect(f.read() == "".join(f"err {i} of rank 1\n" for i in range(3)), "rank 1's stderr.log")
            with open(os.path.join(logs, "job3", "error.json")) as f:
                cause = json.load(f)
            expect((cause["rank"], cause["exit_code"], cause["signal"], cause["run_id"], cause["attempt"]) ==
                   (1, 3, None, "job3", 0), cause)
            expect(cause["stderr_tail"][-1] == "err 2 of rank 1", cause)
            expect(f"root cause written to {os.path.join(logs, 'job3', 'error.json')}: rank 1, exit code 3" in j.err,
                   j.log())
        path = os.path.join(logs, "elsewhere", "cause.json")
        # rank 0 killed, rank 1 stopped and saved (75: the job is requeued): the cause is still recorded
        with Job("--nproc-per-node", "2", mode="crash,wait_for_signal", env={"TORCHELASTIC_ERROR_FILE": path}) as j:
            expect(j.run() == 75, j.log())
            with open(path) as f:
                cause = json.load(f)
            expect((cause["rank"], cause["exit_code"], cause["signal"]) == (0, None, "SIGKILL"), cause)
        with Job("--nproc-per-node", "2", "--log-dir", logs, "--rdzv-id", "job4", mode="exit75") as j:
            expect(j.run() == 75, j.log())
            expect(not os.path.exists(os.path.join(logs, "job4", "error.json")), "an error file for exit 75")


def test_a_worker_ended_by_the_forwarded_signal_was_interrupted():
    """A worker that the forwarded signal ends by its default action had not started dlrun's
    main() yet: nothing was trained or lost, so the job was interrupted (75), not failed."""
    for modes in ("wait_for_signal,default_signals", "default_signals"):
        with Job("--nproc-per-node", "2", "--max-restarts", "1", mode=modes) as j:
            j.start()
            j.wait_for_workers(2)
            j.proc.send_signal(signal.SIGTERM)
            code = j.finish()
            expect(code == 75, f"{modes}: exit {code}{j.log()}")
            expect("rank 1 ended by the forwarded SIGTERM while still loading" in j.err, j.log())
            expect("failed" not in j.err, j.log())
            expect(sorted(j.records()) == [(0, 0), (1, 0)], f"restarted after a signal: {sorted(j.records())}")
    with Job("--nproc-per-node", "1", mode="default_signals") as j:  # a worker's own death by SIGTERM is a failure
        j.start()
        j.wait_for_workers(1)
        os.kill(j.records()[0, 0]["pid"], signal.SIGTERM)
        expect(j.finish() == 1, j.log())
        expect("rank 0 failed (killed by SIGTERM)" in j.err, j.log())


def test_a_stop_before_any_step_says_there_is_nothing_to_resume():
    """75 is what a scheduler needs either way; the launcher's last line says what is true: a stop
    during start-up (dlrun: "nothing trained yet") or while loading left nothing to resume."""
    for mode in ("startup_stop", "default_signals"):
        with Job("--nproc-per-node", "2", mode=mode) as j:
            j.start()
            j.wait_for_workers(2)
            j.proc.send_signal(signal.SIGTERM)
            expect(j.finish() == 75, j.log())
            expect("stopped during start-up, before any step: nothing was trained or written, there is nothing to "
                   "resume" in j.err, j.log())
            expect("committed checkpoint" not in j.err, j.log())
    with Job("--nproc-per-node", "2", mode="wait_for_signal") as j:  # a stop after training: a checkpoint
        j.start()
        j.wait_for_workers(2)
        j.proc.send_signal(signal.SIGTERM)
        expect(j.finish() == 75, j.log())
        expect("interrupted with a committed checkpoint (exit 75)" in j.err, j.log())


def test_a_failure_while_stopping_sends_no_second_signal():
    """After a forwarded signal the workers are saving: a failing rank must not cut that short,
    and the launcher, asked to stop, does not restart."""
    with Job("--nproc-per-node", "2", "--max-restarts", "1", mode="fail_on_signal,wait_for_signal",
             env={"FAKE_SAVE_S": "1"}) as j:
        j.start()
        j.wait_for_workers(2)
        j.proc.send_signal(signal.SIGUSR1)
        expect(j.finish() == 75, j.log())  # rank 1 committed its checkpoint
        recs = j.records()
        expect(sorted(recs) == [(0, 0), (1, 0)], f"restarted after a signal: {sorted(recs)}")
        expect(recs[1, 0]["signals"] == ["SIGUSR1"], f"rank 1 received {recs[1, 0]['signals']}")
        expect("rank 0 failed (exit code 3)" in j.err and "received SIGUSR1: no restart" in j.err, j.log())


def test_a_worker_ignoring_sigterm_is_killed_after_the_timeout():
    with Job("--nproc-per-node", "2", "--shutdown-timeout", "2", "--max-restarts", "1",
             mode="wait_for_signal,ignore_term") as j:
        j.start()
        j.wait_for_workers(2)
        start = time.time()
        j.proc.send_signal(signal.SIGTERM)
        code = j.finish()
        took = time.time() - start
        expect(code == 75, f"exit {code}{j.log()}")  # rank 0 committed: killing rank 1 does not undo that
        expect(1.8 <= took <= 20, f"the launcher took {took:.1f} s, not about 2 s")
        recs = j.records()
        expect(sorted(recs) == [(0, 0), (1, 0)], f"restarted after a signal: {sorted(recs)}")
        expect(recs[1, 0]["signals"] == ["SIGTERM"], recs[1, 0])
        expect("rank 1 still running 2 s" in j.err and "killed by SIGKILL" in j.err, j.log())
        expect("received SIGTERM: no restart" in j.err, j.log())


def test_a_frozen_worker_is_stopped_when_another_ends():
    """kill -STOP of one worker while the other commits and exits 75 (dlrun's survivors do, after
    dist.peer_timeout_s): the launcher does not wait for the frozen one for ever. It sends SIGTERM
    (queued: the process is stopped), SIGKILL after --shutdown-timeout, and exits 75, the job's
    code. Without a signal to the launcher; and with one (SIGTERM while a worker is frozen)."""
    for signal_the_launcher in (False, True):
        with Job("--nproc-per-node", "2", "--shutdown-timeout", "2", mode="wait_for_signal,ignore_term") as j:
            j.start()
            j.wait_for_workers(2)
            frozen = j.records()[1, 0]["pid"]
            os.kill(frozen, signal.SIGSTOP)
            try:
                start = time.time()
                if signal_the_launcher:
                    j.proc.send_signal(signal.SIGTERM)
                else:
                    os.kill(j.records()[0, 0]["pid"], signal.SIGTERM)  # rank 0 ends on its own (exit 75)
                code = j.finish(timeout=30)
                took = time.time() - start
            finally:
                try:
                    os.kill(frozen, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            expect(code == 75, f"exit {code}{j.log()}")
            expect(took <= 20, f"the launcher took {took:.1f} s")
            expect("rank 1 still running 2 s" in j.err and "SIGKILL" in j.err, j.log())
            if not signal_the_launcher:
                expect("rank 0 ended (exit code 75): stopping the other workers" in j.err, j.log())
            expect("exit 75" in j.err, j.log())


def test_a_restart_resumes_a_train_command():
    # (arguments after the binary, the same on the restart)
    cases = [(["train", "c.yaml", "--resume", "never", "--force", "x=1"],
              ["train", "c.yaml", "--resume", "auto", "x=1"]),
             (["train", "c.yaml", "--resume=/ckpt/step-00000007", "x=1"], ["train", "c.yaml", "--resume=auto", "x=1"]),
             (["train", "c.yaml", "--force"], ["train", "c.yaml", "--resume", "auto"]),
             (["eval", "c.yaml", "--force", "--resume", "never"], ["eval", "c.yaml", "--force", "--resume", "never"])]
    for args, again in cases:
        tmp = tempfile.mkdtemp(prefix="dlrun-launch-bin-")
        try:
            binary = fake_dlrun(tmp)
            with Job("--nproc-per-node", "2", "--max-restarts", "1", command=["--", binary, *args],
                     mode="ok,fail_until_restart_1") as j:
                expect(j.run() == 0, f"{args}: exit {j.proc.returncode}{j.log()}")
                recs = j.records()
                expect(sorted(recs) == [(0, 0), (0, 1), (1, 0), (1, 1)], f"{args}: {sorted(recs)}")
                for rank in (0, 1):
                    expect(recs[rank, 0]["argv"] == args, recs[rank, 0]["argv"])
                    expect(recs[rank, 1]["argv"] == again, f"{args} restarted as {recs[rank, 1]['argv']}")
                    expect(recs[rank, 1]["env"]["TORCHELASTIC_RESTART_COUNT"] == "1", recs[rank, 1]["env"])
                expect("rank 1 failed (exit code 3)" in j.err and "restart 1 of 1" in j.err, j.log())
        finally:
            shutil.rmtree(tmp)


def test_a_worker_failing_every_time_ends_the_restarts():
    with Job("--nproc-per-node", "2", "--max-restarts", "2", mode="ok,fail") as j:
        start = time.time()
        expect(j.run() == 1, j.log())
        expect(time.time() - start >= 2, "no pause before the restarts")
        recs = j.records()
        expect(sorted(k for k in recs if k[0] == 1) == [(1, 0), (1, 1), (1, 2)], sorted(recs))
        expect([recs[1, n]["env"]["TORCHELASTIC_RESTART_COUNT"] for n in range(3)] == ["0", "1", "2"], recs)
        last = j.err.strip().splitlines()[-1]
        expect("rank 1 failed (exit code 3)" in last and "no restart left" in last, j.log())


def test_a_worker_refusing_its_input_exits_2_without_restarts():
    """dlrun's exit 2 (a bad config, data or checkpoint) comes through the launcher, as every
    rank's code does without it; restarting would meet the same refusal."""
    with Job("--nproc-per-node", "2", "--max-restarts", "2", mode="ok,bad_input") as j:
        expect(j.run() == 2, j.log())
        expect(sorted(j.records()) == [(0, 0), (1, 0)], sorted(j.records()))
        expect("rank 1 refused its input (exit 2" in j.err and "no restart" in j.err, j.log())


def test_a_bare_subcommand_runs_dlrun():
    tmp = tempfile.mkdtemp(prefix="dlrun-launch-bin-")
    try:
        binary = fake_dlrun(tmp)
        with Job(command=["train", "c.yaml", "x=1"], env={"DLRUN": binary}) as j:
            expect(j.run() == 0, j.log())
            r = j.records()[0, 0]
            expect(r["argv"] == ["train", "c.yaml", "x=1"] and r["env"]["FAKE_VIA_WRAPPER"] == "1", r)
            expect(f"command: {binary} train c.yaml x=1" in j.err, j.log())
        with Job(command=["train", "c.yaml"], env={"DLRUN": os.path.join(tmp, "missing")}) as j:
            expect(j.run() == 2 and "$DLRUN" in j.err and not j.records(), j.log())
    finally:
        shutil.rmtree(tmp)


def test_gpu_counts():
    tmp = tempfile.mkdtemp(prefix="dlrun-launch-bin-")
    try:
        no_smi = os.path.join(tmp, "empty")
        os.mkdir(no_smi)
        smi_dir = os.path.join(tmp, "smi")
        os.mkdir(smi_dir)
        with open(os.path.join(smi_dir, "nvidia-smi"), "w") as f:
            f.write("#!/bin/sh\nprintf 'GPU 0: A (UUID: a)\\nGPU 1: B (UUID: b)\\n"
                    "  MIG 1g.10gb Device 0: (UUID: m)\\nGPU 2: C (UUID: c)\\n'\n")
        os.chmod(os.path.join(smi_dir, "nvidia-smi"), 0o755)
        cases = [("gpu", {"CUDA_VISIBLE_DEVICES": "0,3"}, 2), ("auto", {"CUDA_VISIBLE_DEVICES": "", "PATH": no_smi}, 1),
                 ("gpu", {"CUDA_VISIBLE_DEVICES": "", "PATH": smi_dir}, 3)]
        for value, env, n in cases:
            with Job("--nproc-per-node", value, env=env) as j:
                expect(j.run() == 0, f"{value} {env}: {j.log()}")
                expect(sorted(j.records()) == [(r, 0) for r in range(n)], f"{value} {env}: {sorted(j.records())}")
    finally:
        shutil.rmtree(tmp)


def test_bad_usage_exits_2():
    tmp = tempfile.mkdtemp(prefix="dlrun-launch-bin-")
    try:
        cases = [(["--node-rank", "2", "--nnodes", "2"], {}, "--node-rank 2"),
                 (["--nnodes", "0"], {}, "--nnodes 0"),
                 (["--nproc-per-node", "0"], {}, "--nproc-per-node 0"),
                 (["--nproc-per-node", "two"], {}, "--nproc-per-node 'two'"),
                 (["--nproc-per-node", "gpu"], {"CUDA_VISIBLE_DEVICES": "", "PATH": tmp}, "no GPU visible"),
                 (["--master-port", "70000"], {}, "--master-port 70000"),
                 (["--max-restarts", "-1"], {}, "--max-restarts -1"),
                 (["--shutdown-timeout", "-3"], {}, "--shutdown-timeout -3"),
                 (["--nnodes", "x"], {}, "--nnodes"),
                 (["--nnodes", "2:1"], {}, "MAX is below MIN"),
                 (["--nnodes", "1:2", "--node-rank", "1"], {}, "--node-rank with --nnodes 1:2"),
                 (["--nnodes", "1:2", "--rdzv-timeout", "-1"], {}, "--rdzv-timeout -1"),
                 (["--bogus", "1"], {}, "--bogus")]
        for options, env, message in cases:
            with Job(*options, env=env) as j:
                code = j.run()
                expect(code == 2 and message in j.err, f"{options}: exit {code}, expected 2 and {message!r}{j.log()}")
                expect(not j.records(), f"{options}: a worker was started")
        not_a_program = os.path.join(tmp, "not-a-program")
        with open(not_a_program, "wb") as f:
            f.write(b"\x00\x01 neither a binary nor a script\n")
        os.chmod(not_a_program, 0o755)
        for command, message in (([], "no COMMAND"), (["--", "/nonexistent/prog"], "no such executable"),
                                 (["--", not_a_program], "cannot start rank 0")):
            with Job(command=command) as j:
                code = j.run()
                expect(code == 2 and message in j.err, f"{command}: exit {code}, expected 2 and {message!r}{j.log()}")
    finally:
        shutil.rmtree(tmp)


def test_an_elastic_job_forms_its_rounds_and_refuses_another_job():
    """--nnodes 1:2: the launcher that can bind --master-addr:--master-port hosts the rendezvous and
    is node 0 (its first worker rank 0); the workers' store is on the next port; a launcher of
    another job (another --rdzv-id) reaching that rendezvous is refused (exit 2) and changes nothing."""
    port = free_port()
    common = ("--nnodes", "1:2", "--nproc-per-node", "2", "--master-port", str(port), "--rdzv-last-call", "60")
    with Job(*common, "--rdzv-id", "job-a") as host, Job(*common, "--rdzv-id", "job-b") as other, \
            Job(*common, "--rdzv-id", "job-a") as second:
        host.start()
        deadline = time.time() + 60
        while not rdzv_answers(port):
            expect(host.proc.poll() is None and time.time() < deadline, f"no rendezvous on port {port}")
            time.sleep(0.05)
        expect(other.run() == 2 and "give every node the same --rdzv-id" in other.err, other.log())
        expect(not other.records(), "a launcher of another job started workers")
        expect(second.run() == 0, second.log())
        expect(host.finish() == 0, host.log())
        expect("hosting the job's rendezvous" in host.err and "round 0: 2 node(s), world size 4" in host.err, host.log())
        for job, ranks, group in ((host, (0, 1), "0"), (second, (2, 3), "1")):
            recs = job.records()
            expect(sorted(recs) == [(r, 0) for r in ranks], f"{sorted(recs)}{job.log()}")
            for r in ranks:
                e = recs[r, 0]["env"]
                expect((e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["GROUP_RANK"]) == ("4", "2", group), e)
                expect((e["MASTER_PORT"], e["TORCHELASTIC_RUN_ID"]) == (str(port + 1), "job-a"), e)


def rdzv_answers(port):
    """Whether something accepts connections on 127.0.0.1:port (the hosting launcher's rendezvous)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_help():
    expect(os.access(LAUNCH, os.X_OK), f"{LAUNCH} is not executable")
    p = subprocess.run([LAUNCH, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    expect(p.returncode == 0, f"exit {p.returncode}: {p.stderr}")
    for word in ("75", "--max-restarts", "--shutdown-timeout", "LOCAL_RANK", "[rank N]", "--resume auto", "--rdzv-id",
                 "--standalone", "TORCHELASTIC_RUN_ID", "is in use", "MIN:MAX", "--rdzv-last-call"):
        expect(word in p.stdout, f"--help does not mention {word}")


if __name__ == "__main__":
    main([test_env_of_every_worker, test_env_on_the_second_node, test_torchrun_variables_as_a_pytorchjob_sets_them,
          test_the_run_id,
          test_a_port_in_use_is_refused_with_a_way_out, test_standalone_picks_a_free_port_and_a_fresh_run_id,
          test_standalone_is_one_node_on_a_port_of_its_own,
          test_a_worker_that_reaches_another_jobs_store_exits_2_and_that_job_goes_on,
          test_output_is_prefixed_line_by_line,
          test_exit_status_is_combined, test_a_failure_stops_the_other_workers, test_signals_are_forwarded_once,
          test_a_forwarded_signal_reaches_what_a_worker_started, test_log_files_and_the_root_cause_of_a_failure,
          test_a_worker_ended_by_the_forwarded_signal_was_interrupted,
          test_a_failure_while_stopping_sends_no_second_signal, test_a_frozen_worker_is_stopped_when_another_ends,
          test_a_stop_before_any_step_says_there_is_nothing_to_resume,
          test_a_worker_ignoring_sigterm_is_killed_after_the_timeout, test_a_restart_resumes_a_train_command,
          test_a_worker_failing_every_time_ends_the_restarts, test_a_worker_refusing_its_input_exits_2_without_restarts,
          test_a_bare_subcommand_runs_dlrun, test_gpu_counts,
          test_bad_usage_exits_2, test_an_elastic_job_forms_its_rounds_and_refuses_another_job, test_help])
