"""Kill install and restore at every write point and at random times; run them concurrently.

The tree is this environment's installed transformers (copied; see :mod:`reliability_support`).
After every kill each file holds its old or its new bytes, and the next ``install`` or ``restore``
leaves the whole tree pristine or fully patched, with RECORD true to the bytes on disk.
``ASCEND_ENV_RELIABILITY_RUNS`` sets the number of random kills (default 10).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from reliability_support import Tree, crash_points, in_flight, kill_after, run_cli, run_forked, summary

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching.locking import locked
from ascend_env.patching.store import state_dir

RANDOM_KILLS = int(os.environ.get("ASCEND_ENV_RELIABILITY_RUNS", "10"))
# Kill at every crash point, then finish with the same command; the other command finishes
# after every STRIDE-th point (1: every point).
STRIDE = int(os.environ.get("ASCEND_ENV_RELIABILITY_STRIDE", "3"))
SEED = int(os.environ.get("ASCEND_ENV_RELIABILITY_SEED", "20240601"))


@pytest.fixture(scope="module")
def counts(request):
    return summary(request.config, "crash and concurrency")


@pytest.fixture(scope="module")
def tree(tmp_path_factory, counts) -> Tree:
    built = Tree(tmp_path_factory.mktemp("tree"), counts)
    built.learn_patched()
    counts.runs += 1
    return built


def killed(tree: Tree, code: int, how: str) -> None:
    assert code == 137, f"{how}: exit {code}, expected a kill"
    tree.counts.kills += 1
    tree.counts.kills_mid_transaction += in_flight(tree.site)
    tree.check("killed")


def finish(tree: Tree, command: str, expect: str) -> None:
    args = tree.install_args() if command == "install" else tree.restore_args()
    assert run_forked(args) == 0, f"{command} after a kill failed"
    tree.counts.runs += 1
    tree.check(expect)


def test_crash_points_cover_every_change(tree):
    points = crash_points(tree.changes)
    assert len(points) == 7 + 2 * tree.changes
    assert f"change-{tree.changes - 1}" in points


@pytest.mark.parametrize("then", ["install", "restore"])
def test_install_killed_at_every_crash_point(tree, then):
    points = crash_points(tree.changes)
    for point in points if then == "install" else points[::STRIDE]:
        tree.reset()
        killed(tree, run_forked(tree.install_args(), crash=point), f"install at {point}")
        tree.counts.crash_point_kills += 1
        finish(tree, then, "patched" if then == "install" else "pristine")


@pytest.mark.parametrize("then", ["restore", "install"])
def test_restore_killed_at_every_crash_point(tree, then):
    points = crash_points(tree.changes)
    for point in points if then == "restore" else points[::STRIDE]:
        tree.reset()
        assert run_forked(tree.install_args()) == 0
        killed(tree, run_forked(tree.restore_args(), crash=point), f"restore at {point}")
        tree.counts.crash_point_kills += 1
        tree.counts.runs += 2
        finish(tree, then, "pristine" if then == "restore" else "patched")


def test_killed_in_a_fresh_interpreter(tree):
    """The console entry itself (not a fork), killed inside the commit, then finished."""
    for point in ("change-0", "state"):
        tree.reset()
        result = run_cli(tree.install_args(), crash=point)
        killed(tree, result.returncode, f"python -m ascend_env install at {point}")
        tree.counts.crash_point_kills += 1
        status = run_cli(["status", "--target", str(tree.site), "--patches-dir", str(tree.patches)])
        assert status.returncode == 1 and "interrupted" in status.stdout, status.stdout + status.stderr
        rerun = run_cli(tree.install_args())
        assert rerun.returncode == 0 and "finished an interrupted install" in rerun.stdout, rerun.stderr
        tree.counts.runs += 3
        tree.check("patched")


def durations(tree: Tree) -> dict:
    """Seconds an uninterrupted forked install and restore take here (the kill window)."""
    import time

    out = {}
    tree.reset()
    for command, args in (("install", tree.install_args()), ("restore", tree.restore_args())):
        start = time.monotonic()
        assert run_forked(args) == 0
        out[command] = time.monotonic() - start
        tree.counts.runs += 1
    return out


def test_sigkill_at_random_times(tree):
    rng = random.Random(SEED)
    window = durations(tree)
    tree.reset()
    state = "pristine"
    for number in range(RANDOM_KILLS):
        command = "install" if state == "pristine" else "restore"
        args = tree.install_args() if command == "install" else tree.restore_args()
        # Uniform over the run, half the time over its second half, where the commit is.
        low = 0.0 if number % 2 == 0 else window[command] / 2
        code, elapsed = kill_after(args, rng.uniform(low, window[command] * 1.1))
        tree.counts.runs += 1
        if code == 0:
            state = tree.check("either")  # finished before the signal: aim earlier next time
            window[command] = min(window[command], elapsed) * 0.9
            continue
        killed(tree, code, f"{command} killed at random (seed {SEED}, run {number})")
        tree.counts.signal_kills += 1
        then = rng.choice(["install", "restore"])
        finish(tree, then, "patched" if then == "install" else "pristine")
        state = "patched" if then == "install" else "pristine"
    tree.check(state, full=True)


# -- concurrency ---------------------------------------------------------------------------------------


def popen_json(args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ascend_env", *args, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("how_many", [2, 4])
def test_concurrent_installs_apply_once(tree, how_many):
    tree.reset()
    procs = [popen_json(tree.install_args()) for _ in range(how_many)]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    tree.counts.runs += how_many
    assert [proc.returncode for proc in procs] == [0] * how_many, [err for _, err in outputs]
    results = sorted(json.loads(out)["result"] for out, _ in outputs)
    assert results == ["already applied"] * (how_many - 1) + ["applied"]
    tree.check("patched", full=True)


def test_install_racing_restore(tree):
    tree.reset()
    rng = random.Random(SEED)
    for _ in range(2):
        order = [tree.install_args(), tree.restore_args(), tree.install_args(), tree.restore_args()]
        rng.shuffle(order)
        procs = [popen_json(args) for args in order]
        outputs = [proc.communicate(timeout=300) for proc in procs]
        tree.counts.runs += len(procs)
        assert [proc.returncode for proc in procs] == [0] * len(procs), [err for _, err in outputs]
        tree.check("either")


def test_a_held_lock_refuses_with_a_clear_message(tree):
    tree.reset()
    directory = state_dir(tree.site)
    with locked(directory):
        with pytest.raises(EnvironmentProblem) as info:
            with locked(directory, timeout=0.2):
                pass  # pragma: no cover
    assert "another ascend-env run has held" in info.value.problem
    assert "wait for it to finish" in (info.value.fix or "")
    tree.counts.bad_inputs += 1
