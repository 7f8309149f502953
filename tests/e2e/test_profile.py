"""Seeing where the time goes: the per-phase step times in metrics.jsonl and summary.json, the
profile.* Kineto trace of a window of steps, and the warning when the loader is the bottleneck."""
import json
import os

from common import RunDir, cfg, expect, main, train

TINY = cfg("tiny.yaml")
PHASES = ("forward_s", "backward_s", "optimizer_s")


def trace_names(path):
    with open(path) as f:
        trace = json.load(f)  # Chrome trace format: {"traceEvents": [{"name": ..., "ph": ...}, ...]}
    return {e.get("name", "") for e in trace["traceEvents"]}


def test_step_time_breakdown():
    with RunDir() as r:
        train(TINY, r.path, "train.epochs=1", "log.every_steps=4")
        recs = [m for m in r.metrics() if "event" not in m]
        expect([m["step"] for m in recs] == [4, 8, 12, 16], [m["step"] for m in recs])
        for m in recs:
            for k in PHASES:
                expect(m.get(k, 0) > 0, f"step {m['step']}: {k} = {m.get(k)}")
            # The phases of 4 steps take less than the wall time of 4 steps.
            expect(sum(m[k] for k in PHASES) < 4 * 32 / m["samples_per_s"] * 1.05, m)
        t = r.summary()["time_s"]
        expect(set(t) == {"data_wait", "forward", "backward", "optimizer"}, t)
        for k in PHASES:
            expect(abs(t[k[:-2]] - sum(m[k] for m in recs)) < 1e-6, (k, t))
        expect(r.summary()["peak_cuda_memory_mb"] is None, "a CPU run reports no CUDA memory")
        # The same phase times reach TensorBoard, next to the loss.
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        acc = EventAccumulator(r.path)
        acc.Reload()
        for k in PHASES + ("data_wait_s",):
            events = acc.Scalars("train/" + k) if "train/" + k in acc.Tags()["scalars"] else []
            expect([e.step for e in events] == [4, 8, 12, 16], (k, acc.Tags()["scalars"]))
            expect(abs(events[-1].value - recs[-1][k]) < 1e-6, (k, events[-1].value, recs[-1][k]))
        expect(r.summary()["profile_trace"] is None, "no trace without profile.steps")
        expect(not os.path.exists(r.file("profile")), "profile/ written without profile.steps")


def test_profile_trace_of_a_window_of_steps():
    with RunDir() as r:
        p = train(TINY, r.path, "train.epochs=1", "profile.steps=3", "profile.start_step=4",
                  "profile.record_shapes=true")
        path = r.file("profile", "rank0.step5.pt.trace.json")
        expect(os.path.isfile(path), f"no trace; run dir has {os.listdir(r.path)}\n{p.stdout}")
        expect(r.summary()["profile_trace"] == path, r.summary()["profile_trace"])
        names = trace_names(path)
        for n in ("ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7", "dlrun::forward", "dlrun::backward",
                  "dlrun::optimizer", "dlrun::data_wait", "aten::convolution"):
            expect(n in names, f"{n} not in the trace")
        for n in ("ProfilerStep#4", "ProfilerStep#8"):
            expect(n not in names, f"{n} is outside the window, but in the trace")
        expect("steps 5..7 traced into" in p.stdout, p.stdout)


def test_profile_window_cut_short_by_the_end_of_the_run():
    with RunDir() as r:
        out = os.path.join(r.path, "traces")
        train(TINY, r.path, "train.epochs=1", "profile.steps=10", "profile.start_step=14", f"profile.path={out}")
        names = trace_names(os.path.join(out, "rank0.step15.pt.trace.json"))
        expect("ProfilerStep#15" in names and "ProfilerStep#16" in names, sorted(n for n in names if "Step" in n))


def test_a_window_the_run_cannot_reach_moves_to_its_last_steps():
    # profile.start_step past the end of a 16-step run used to write nothing and say nothing.
    with RunDir() as r:
        p = train(TINY, r.path, "train.epochs=1", "profile.steps=3", "profile.start_step=100")
        expect("profile.start_step=100 is past the end of this run (16 steps): tracing steps 14..16 instead" in p.stdout,
               p.stdout[-2000:])
        names = trace_names(r.file("profile", "rank0.step14.pt.trace.json"))
        expect({"ProfilerStep#14", "ProfilerStep#16"} <= names, sorted(n for n in names if "Step" in n))
        # A resumed segment that starts past the window says it traces nothing.
        p = train(TINY, r.path, "train.epochs=2", "profile.steps=3", "profile.start_step=4")
        expect("this segment starts after step 16, past profile.start_step=4: no trace" in p.stdout, p.stdout[-2000:])


def test_a_slow_loader_is_named_the_bottleneck():
    """Over a window of 20 steps and 5 s after the first log interval (a short run says nothing),
    naming what helps on this host: never more workers than it has cores."""
    with RunDir() as r:
        p = train(TINY, r.path, "train.epochs=2", "log.every_steps=4", env={"DLRUN_FAULT": "slow_batch:200"})
        warnings = [line for line in p.stdout.splitlines() if "data loader is the bottleneck" in line]
        expect(len(warnings) == 1, p.stdout)
        cores = os.cpu_count()
        expect(f"raise data.workers (now 2; this host has {cores} cores)" in warnings[0] if cores > 2 else
               f"data.workers (2) already uses this host's {cores} cores" in warnings[0], warnings[0])
        recs = [m for m in r.metrics() if "event" not in m]
        expect(all(m["data_wait_frac"] > 0.25 for m in recs[1:]), [m["data_wait_frac"] for m in recs])
        p = train(TINY, r.path, "train.epochs=4", "data.workers=1", "log.every_steps=4",
                  env={"DLRUN_FAULT": "slow_batch:200"})  # (resumes at step 32)
        warnings = [line for line in p.stdout.splitlines() if "data loader is the bottleneck" in line]
        expect(len(warnings) == 1 and ("raise data.workers (now 1" in warnings[0]) == (cores > 1), p.stdout[-2000:])
    with RunDir() as r:  # a tiny run, slow at every step: no window to judge by
        p = train(TINY, r.path, "train.max_steps=8", "log.every_steps=1", env={"DLRUN_FAULT": "slow_batch:100"})
        expect("data loader is the bottleneck" not in p.stdout, p.stdout[-2000:])


if __name__ == "__main__":
    main([test_step_time_breakdown, test_profile_trace_of_a_window_of_steps,
          test_profile_window_cut_short_by_the_end_of_the_run, test_a_window_the_run_cannot_reach_moves_to_its_last_steps,
          test_a_slow_loader_is_named_the_bottleneck])
