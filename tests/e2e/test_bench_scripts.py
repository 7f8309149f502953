"""The benchmark scripts a GPU session depends on, exercised on the CPU so that their first GPU
run does not fail on plumbing: bench/compare.py end to end on two short workloads (one of them a
DDP world of one through the launcher, on both sides), its failure report, and
bench/gpu_suite.sh: its syntax, and its plumbing (carried executables, packed results, the
time budget, a failing part) on a part that runs here."""
import json
import os
import re
import subprocess
import sys
import tempfile

from common import DLRUN, SRC, expect, main

COMPARE = os.path.join(SRC, "bench", "compare.py")


def compare(*args):
    return subprocess.run([sys.executable, COMPARE, "--dlrun", DLRUN, "--reps", "1", "--steps", "40",
                           "--threads", "1", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)


def test_compare_reports_both_sides():
    with tempfile.TemporaryDirectory(prefix="dlrun-compare-test-") as tmp:
        report = os.path.join(tmp, "report.md")
        with open(report, "w") as f:
            f.write("# before\n")
        p = compare("--workloads", "cpu-quickstart-step,cpu-quickstart-ddp1", "--out", os.path.join(tmp, "logs"),
                    "--append", report)
        expect(p.returncode == 0, p.stdout)
        text = open(report).read()
        expect(text.startswith("# before\n"), "the report replaced the file instead of appending")
        expect("Machine: " in text and "torch " in text and "dlrun " in text, text)
        for name in ("cpu-quickstart-step", "cpu-quickstart-ddp1"):
            row = [line for line in text.splitlines() if line.startswith(f"| {name} |")]
            expect(len(row) == 1, (name, text))
            cells = [c.strip() for c in row[0].strip("|").split("|")]
            ours, theirs, ratio = float(cells[1]), float(cells[2]), float(cells[3].strip("*"))
            expect(ours > 0 and theirs > 0 and abs(ratio - ours / theirs) < 0.01, row)
            for side in (cells[4], cells[5]):  # data / forward / backward / optimizer, ms per step
                ms = [float(x) for x in side.split(" / ")]
                expect(len(ms) == 4 and ms[1] > 0 and ms[2] > 0, (name, side))
        # The DDP world of one really ran distributed on both sides.
        dl = open(os.path.join(tmp, "logs", "cpu-quickstart-ddp1-dlrun-0.log")).read()
        expect(re.search(r"distributed: gloo, world size 1", dl), dl[-3000:])


def test_compare_reports_a_failed_workload_and_goes_on():
    with tempfile.TemporaryDirectory(prefix="dlrun-compare-test-") as tmp:
        p = compare("--workloads", "cpu-quickstart-step,cpu-quickstart-ddp1", "--fmnist", os.path.join(tmp, "none"),
                    "--out", os.path.join(tmp, "logs"))
        expect(p.returncode == 1, (p.returncode, p.stdout))
        for name in ("cpu-quickstart-step", "cpu-quickstart-ddp1"):  # the second ran after the first failed
            expect(f"**{name} failed**" in p.stdout, p.stdout)
        expect(os.path.exists(os.path.join(tmp, "logs", "cpu-quickstart-ddp1-dlrun-0.log")), os.listdir(tmp))


def test_compare_rejects_an_unknown_workload():
    p = compare("--workloads", "cpu-nothing")
    expect(p.returncode != 0 and "unknown workload cpu-nothing" in p.stdout, p.stdout)


def test_gpu_suite_plumbing_on_the_cpu():
    # The suite run from carried executables (as a device call after the one that built), with
    # one part that works here (bench ckpt's CPU half), one that fails (its CUDA half) and one the
    # budget leaves out: every result packed into $OUT as summary.md and one archive, the failure
    # and the skip said in the summary, the exit code 1.
    import tarfile
    with tempfile.TemporaryDirectory(prefix="dlrun-gpu-suite-test-") as tmp:
        binaries = os.path.join(tmp, "bin")
        os.makedirs(binaries)
        os.symlink(DLRUN, os.path.join(binaries, "dlrun"))
        out, work = os.path.join(tmp, "out"), os.path.join(tmp, "work")
        env = dict(os.environ, OUT=out, DLRUN_GPU_WORK=work, DLRUN_GPU_BIN=binaries,
                   DLRUN_GPU_DEVDEPS=os.path.join(tmp, "none"), DLRUN_GPU_PARTS="ckpt kernels",
                   DLRUN_GPU_BUDGET_S="100")
        p = subprocess.run(["bash", os.path.join(SRC, "bench", "gpu_suite.sh")], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
        expect(p.returncode == 1, (p.returncode, p.stdout))
        expect(sorted(os.listdir(out)) == ["gpu-results.tgz", "summary.md"], os.listdir(out))
        summary = open(os.path.join(out, "summary.md")).read()
        for want in ("executables from", "- FAILED: bench ckpt --device cuda", "- skipped kernels:",
                     "FAILED steps: bench ckpt --device cuda"):
            expect(want in summary, (want, summary))
        with tarfile.open(os.path.join(out, "gpu-results.tgz")) as t:
            ckpt = json.load(t.extractfile("./bench-ckpt-cpu.json"))
            names = t.getnames()
        expect(ckpt["device"] == "cpu" and ckpt["model"] == "resnet50" and len(ckpt["runs"]) == 3, ckpt)
        expect("./summary.md" in names and "./suite.log" in names, names)


def test_interruptions_bench_reports_and_ends_at_the_same_result():
    """bench/interruptions.py, short: 3 interruptions (SIGTERM, SIGUSR1, SIGKILL in some order)
    of a 300-step run; it exits non-zero when the interrupted run ends elsewhere."""
    p = subprocess.run([sys.executable, os.path.join(SRC, "bench", "interruptions.py"), "--dlrun", DLRUN,
                        "--interruptions", "3", "--steps", "300", "--seed", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    expect(p.returncode == 0, p.stdout[-3000:])
    expect("| params_sha256 |" in p.stdout and "| same |" in p.stdout, p.stdout)
    for kind in ("SIGTERM", "SIGUSR1", "SIGKILL"):
        expect(kind in p.stdout, p.stdout)


def test_gpu_suite_parses():
    p = subprocess.run(["bash", "-n", os.path.join(SRC, "bench", "gpu_suite.sh")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    expect(p.returncode == 0, p.stdout)


if __name__ == "__main__":
    main([test_compare_reports_both_sides, test_compare_reports_a_failed_workload_and_goes_on,
          test_compare_rejects_an_unknown_workload, test_gpu_suite_plumbing_on_the_cpu, test_gpu_suite_parses,
          test_interruptions_bench_reports_and_ends_at_the_same_result])
