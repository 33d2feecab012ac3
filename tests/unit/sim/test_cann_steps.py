"""The emulated CANN's counters per decoding step (``sim/cann_steps.py``), with counters and a
device wait stood in: what a step counts is what changed between its boundaries, after the wait."""

from __future__ import annotations

from typing import Dict, List

from ascend_env.sim.cann_steps import Steps, counters_of, difference


class Device:
    """Counters that grow as kernels run; queued kernels count only once the queue is waited for."""

    def __init__(self) -> None:
        self.counted: Dict[str, Dict[str, int]] = {"aclop_compile": {}, "aclop": {}, "aclnn": {}}
        self.queued: List[tuple] = []
        self.waits = 0

    def run(self, kind: str, name: str, n: int = 1) -> None:
        self.queued.append((kind, name, n))

    def synchronize(self) -> None:
        self.waits += 1
        for kind, name, n in self.queued:
            self.counted[kind][name] = self.counted[kind].get(name, 0) + n
        self.queued.clear()

    def counters(self) -> Dict[str, Dict[str, int]]:
        return {kind: dict(names) for kind, names in self.counted.items()}


def test_each_step_counts_what_ran_in_it_after_waiting_for_the_queue() -> None:
    device = Device()
    steps = Steps(device.counters, device.synchronize)
    device.run("aclnn", "aclnnAdd", 5)  # before generate(): not in any step
    steps.enter_generate("script.py:3")
    steps.generation_mode("greedy_search")
    device.run("aclop_compile", "Cast", 2)
    device.run("aclop", "Cast", 2)
    device.run("aclnn", "aclnnMul", 3)
    steps.step_done()
    device.run("aclnn", "aclnnMul", 4)
    device.run("aclop", "Cast", 1)  # run again: no new compile
    steps.step_done()
    steps.enter_generate("nested.py:1")  # a nested generate() is part of the outer one
    steps.exit_generate()
    device.run("aclnn", "aclnnAny")
    steps.exit_generate()
    [run] = steps.report()
    assert run["site"] == "script.py:3" and run["mode"] == "greedy_search"
    assert run["steps"] == [
        {"compiles": 2, "aclop": 2, "aclnn": 3, "compiles_by_type": {"Cast": 2}},
        {"compiles": 0, "aclop": 1, "aclnn": 4, "compiles_by_type": {}},
    ]
    assert run["after"] == {"compiles": 0, "aclop": 0, "aclnn": 1, "compiles_by_type": {}}
    assert device.waits == 4  # enter, two steps, exit: every boundary waited for the device


def test_without_the_wait_queued_kernels_would_land_in_the_wrong_step() -> None:
    device = Device()
    steps = Steps(device.counters, lambda: None)  # no wait: the measurement this guards against
    steps.enter_generate()
    device.run("aclnn", "aclnnMul", 3)
    steps.step_done()
    assert steps.report()[0]["steps"][0]["aclnn"] == 0


def test_steps_outside_generate_are_not_counted() -> None:
    device = Device()
    steps = Steps(device.counters, device.synchronize)
    steps.step_done()  # a StoppingCriteriaList called by hand
    assert steps.report() == []


def test_difference_and_counters_of() -> None:
    before = {"aclop_compile": {"Cast": 1}, "aclnn": {"aclnnAdd": 2}}
    after = {
        "aclop_compile": {"Cast": 1, "MatMul": 2, "Add": 2},
        "aclnn": {"aclnnAdd": 5},
        "aclop": {"Cast": 4},
    }
    assert difference(before, after) == {
        "compiles": 4,
        "aclop": 4,
        "aclnn": 3,
        "compiles_by_type": {"Add": 2, "MatMul": 2},
    }
    assert counters_of({"counters": {"aclnn": {"aclnnAdd": 2.0}, "bad": 3}}) == {"aclnn": {"aclnnAdd": 2}}
    assert counters_of({}) == {}
