"""A short chaos schedule (bench/chaos.py, a fixed seed that aims faults at every phase: a step, an
epoch's end, a restore, a start-up; small MNIST files made here): faults injected
from outside into an asynchronous and a synchronous parameter-server job, a deterministic
multi-worker job and an asynchronous job with --record, each for about 20 s. No hang, every fault
named, no unreadable checkpoint, no end that the rules do not explain, the accuracy reached, the
resumed deterministic job's weights equal to an uninterrupted run's, and the steps the record shows
handed out again exactly those the log says. The long schedules are bench/chaos.py's."""
import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

from conftest import CLI, ROOT

CHAOS = ROOT / "bench" / "chaos.py"


def load_harness():
    spec = importlib.util.spec_from_file_location("chaos", CHAOS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_seed_draws_the_same_schedule_and_another_seed_another():
    chaos = load_harness()
    for job in ("async", "sync", "multiworker"):
        assert chaos.schedule(7, job, 6) == chaos.schedule(7, job, 6)
        # --minutes draws lazily from the same generators: its first n faults are --faults n's.
        drawn = chaos.draws(7, job)
        assert [next(drawn) for _ in range(6)] == chaos.schedule(7, job, 6) == chaos.schedule(7, job, 9)[:6]
    assert chaos.schedule(7, "async", 6) != chaos.schedule(8, "async", 6)


def test_a_short_chaos_schedule_leaves_every_job_whole(tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not here (Open MPI: the README's set-up command installs it)")
    out = tmp_path / "chaos.json"
    # The watchdog: within ctest's limit (600 s), the harness is told to end (it ends its jobs, which
    # run in sessions of their own); it also ends if this process dies first.
    # Seed 34 aims a fault at every phase: a step, an epoch's end, a restore (the multi-worker job's
    # resume after rank 1 was killed), and a start-up (the asynchronous job's first fault, a worker
    # killed as the job starts; strangers and a kill as the resumed multi-worker job starts).
    run = subprocess.Popen([sys.executable, str(CHAOS), "--synthetic", "--seed", "34", "--faults", "4", "--epochs",
                            "150", "--cli", str(CLI), "--json", str(out), "--end-with-parent"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        said, _ = run.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        run.terminate()
        said, _ = run.communicate(timeout=60)
        pytest.fail("the chaos harness ran past 540 s and was ended:\n" + said)
    assert run.returncode == 0, said
    results = {r["job"]: r for r in json.loads(out.read_text())}
    assert set(results) == {"async", "sync", "multiworker", "async-record"}, said
    for job, r in results.items():
        assert r["faults"] >= 2, (job, said)  # the schedule hit the job, not a finished one
        assert r["hangs"] == 0, (job, said)
        assert r["unnamed"] == [], (job, said)
        assert r["ended_against_rule"] == [], (job, said)
        assert r["unreadable_checkpoints"] == [], (job, said)
        assert r["accuracy"] is not None and r["accuracy"] >= 90.0, (job, said)
    assert results["multiworker"]["ended_by_rule"] >= 1, said  # it was resumed at least once
    aimed = {phase for r in results.values() for phase in r["aimed"]}
    assert {"step", "epoch-end", "restore", "start-up"} <= aimed, (aimed, said)
    assert results["multiworker"]["hash_equal"], said
    record = results["async-record"]["record"]  # the steps handed out again are those the log says
    assert record["agrees"] and record["steps_handed_again"] >= 1, (record, said)
