"""Real torchrun (torch's elastic agent) growing a dlrun job from one node to two, with the
workaround docs/distributed.md gives for torch 2.11: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (with the
agent's shared TCP store, the round a joining node starts never gets MASTER_ADDR: pytorch issue
135712). Two torchrun agents on this host (`--nnodes 1:2`, c10d rendezvous on 127.0.0.1): the
first trains alone; the second joins; the first's agent stops its worker (SIGTERM: dlrun saves
and exits 75) and both start a round of two, which resumes from the checkpoint at world size 2
and trains to the end. A torch upgrade that changes this is noticed here.
"""
import json
import os
import socket
import subprocess
import sys
import time

from common import DLRUN, RunDir, cfg, expect, main

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
STEPS = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def events(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def grow(workaround=True, timeout=300):
    port = free_port()
    with RunDir() as r:
        env = dict(os.environ, DLRUN_FAULT="slow_batch:40")
        if workaround:
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        env.pop("OMP_NUM_THREADS", None)
        command = [TORCHRUN, "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"grow-{port}", "--max-restarts", "3",
                   "--monitor-interval", "0.5", "--no-python", DLRUN, "train", cfg("tiny.yaml"), "--run-dir", r.path,
                   f"train.max_steps={STEPS}", "checkpoint.every_steps=5", "run.threads=1", "log.progress=none",
                   "train.eval_at_end=false"]
        agents = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)]
        outs = []
        try:
            deadline = time.monotonic() + 180
            while not any(e.get("event") == "checkpoint" for e in events(r.path)):
                expect(agents[0].poll() is None, f"the first agent exited {agents[0].returncode}")
                expect(time.monotonic() < deadline, "the first node saved no checkpoint in 180 s")
                time.sleep(0.1)
            agents.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True, start_new_session=True))
            for a in agents:
                outs.append(a.communicate(timeout=timeout)[0])
        finally:
            for a in agents:
                if a.poll() is None:
                    os.killpg(a.pid, 9)
                    a.communicate()
        log = "\n".join(o[-2500:] for o in outs)
        expect([a.returncode for a in agents] == [0, 0], f"agents exited {[a.returncode for a in agents]}:\n{log}")
        starts = [e for e in events(r.path) if e.get("event") == "start"]
        sizes = [e.get("world_size") for e in starts]
        expect(sizes[0] == 1 and sizes[-1] == 2, f"the starts' world sizes {sizes}:\n{log}")
        with open(os.path.join(r.path, "summary.json")) as f:
            summary = json.load(f)
        expect(summary["status"] == "completed" and summary["steps"] == STEPS and summary["world_size"] == 2 and
               summary["resumed_from_step"] > 0, summary)
        print(f"  one node, then two: world sizes {sizes}; resumed at step {summary['resumed_from_step']} "
              f"with 2 ranks, {summary['status']} at step {summary['steps']}")


def test_a_job_grows_from_one_node_to_two():
    grow()


if __name__ == "__main__":
    sys.exit(main([test_a_job_grows_from_one_node_to_two]))
