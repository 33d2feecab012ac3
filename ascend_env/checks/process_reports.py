"""The reports the audited processes wrote (``ascend_env.sim.reports.ProcessReport``), read as the
state files are read: bounded in size and depth, each value checked; a report that is not as the
reporter (:class:`ascend_env._audited.Reporter`) writes it is a problem, never an exception.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, NamedTuple, Optional, Set, Tuple, cast

from ascend_env.sim.reports import ProcessReport
from ascend_env.utils import jsontext, proctree

__all__ = ["MAX_REPORT_BYTES", "Exec", "Reports", "collect", "read_execs", "read_reports", "reported_images"]

#: A report larger than this is not read (a process wrote over the report directory).
MAX_REPORT_BYTES = 64 << 20


class Reports(NamedTuple):
    """What the processes wrote: the reports that read well, and a problem for each that did not."""

    good: List[ProcessReport]
    bad: List[str]


def read_reports(directory: Path) -> Reports:
    """The reports in ``directory``, oldest pid first, read as the state files are read: bounded
    in size and depth, each value checked; a report that is not as the reporter writes it is a
    problem (``"<file>: <why>"``), never an exception."""
    good: List[ProcessReport] = []
    bad: List[str] = []
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".json"))
    except OSError:
        names = []
    for name in names:
        problem, report = _read_report(directory / name)
        if report is not None:
            good.append(report)
        elif problem is not None:
            bad.append(f"{name}: {problem}")
    good.sort(key=lambda r: r["pid"])
    return Reports(good, bad)


def collect(reports: Path) -> List[ProcessReport]:
    """The reports the audited processes wrote that read well, oldest pid first."""
    return read_reports(reports).good


def _read_report(path: Path) -> Tuple[Optional[str], Optional[ProcessReport]]:
    try:
        # Only a regular file, never blocking: a process may leave a FIFO named like a report.
        data = jsontext.read_regular(path, MAX_REPORT_BYTES + 1)
    except FileNotFoundError:  # replaced or removed as it was listed
        return None, None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})", None
    if len(data) > MAX_REPORT_BYTES:
        return f"larger than {MAX_REPORT_BYTES} bytes", None
    try:
        value = jsontext.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"is not JSON ({str(exc)[:120]})", None
    problem = _report_problem(value)
    return (problem, None) if problem else (None, cast(ProcessReport, value))


_OPTIONAL_INT = ("start", "generation")
_OPTIONAL_STR = ("rank", "origin", "table", "torch_npu", "error", "unaudited", "extra_error")
_OPTIONAL_BOOL = ("torch", "npu_used", "autoload", "silenced")


def _report_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a report as :class:`ascend_env._audited.Reporter` writes it."""
    if not isinstance(value, dict):
        return f"holds a {type(value).__name__}, not an object"
    if not _is_int(value.get("pid")):
        return "has no pid"
    if value.get("ppid") is not None and not _is_int(value["ppid"]):
        return "has a ppid that is not a number"
    argv = value.get("argv")
    if argv is not None and not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return "has an argv that is not a list of strings"
    for key in _OPTIONAL_INT:
        if value.get(key) is not None and not (_is_int(value[key]) and value[key] >= 0):
            return f"has a {key} that is not a count"
    for key in _OPTIONAL_STR:
        if value.get(key) is not None and not isinstance(value[key], str):
            return f"has a {key} that is not a string"
    for key in _OPTIONAL_BOOL:
        if key in value and not isinstance(value[key], bool):
            return f"has a {key} that is not true or false"
    fallbacks = value.get("fallbacks", {})
    if not isinstance(fallbacks, dict) or not all(
        isinstance(k, str) and _is_int(v) and v >= 0 for k, v in fallbacks.items()
    ):
        return "has fallbacks that are not counts by op"
    end = value.get("end")
    if end is not None and not isinstance(end, dict):
        return "has an end that is not an object"
    events = value.get("hook_events")
    if events is not None and not (isinstance(events, list) and all(isinstance(e, str) for e in events)):
        return "has hook_events that are not a list of strings"
    if "paths" in value and not isinstance(value["paths"], dict):
        return "has paths that are not an object"
    if "cann" in value and not isinstance(value["cann"], dict):
        return "has cann counters that are not an object"
    if "cann_steps" in value and not _measured_runs(value["cann_steps"]):
        return "has cann_steps that are not generate() runs of measured steps"
    fd2 = value.get("fd2")
    if fd2 is not None and not (isinstance(fd2, list) and len(fd2) == 2 and all(_is_int(n) for n in fd2)):
        return "has an fd2 that is not a device and an inode"
    return None


def _measured_runs(value: Any) -> bool:
    """Whether ``value`` is a list of runs as :class:`ascend_env.sim.cann_steps.Steps` reports them."""

    def step(item: Any) -> bool:
        return (
            isinstance(item, dict)
            and all(_is_int(item.get(k)) and item[k] >= 0 for k in ("compiles", "aclop", "aclnn"))
            and isinstance(item.get("compiles_by_type"), dict)
            and all(isinstance(k, str) and _is_int(n) for k, n in item["compiles_by_type"].items())
        )

    return isinstance(value, list) and all(
        isinstance(run, dict)
        and isinstance(run.get("site"), str)
        and (run.get("mode") is None or isinstance(run["mode"], str))
        and isinstance(run.get("steps"), list)
        and all(step(s) for s in run["steps"])
        and (run.get("after") is None or step(run["after"]))
        for run in value
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _image(name: str) -> Optional[Tuple[int, int, int]]:
    """(pid, start, generation) of a report's or exec marker's name,
    ``<pid>-<start>-<generation>-<random>``."""
    words = name.split("-")
    if len(words) != 4 or not all(word.isdigit() for word in words[:3]):
        return None
    return int(words[0]), int(words[1]), int(words[2])


def reported_images(reports: Path) -> proctree.Reported:
    """The process images that wrote a report, and those that ran ``exec`` (from the file names:
    ``<pid>-<start>-<generation>-<random>.json`` and ``.exec``)."""
    try:
        names = os.listdir(reports)
    except OSError:
        return proctree.Reported()
    found: Set[Tuple[int, int, int]] = set()
    execs: Set[Tuple[int, int, int]] = set()
    legacy: Set[int] = set()
    for name in names:
        stem, dot, kind = name.partition(".")
        image = _image(stem) if dot else None
        if image is not None and kind in ("json", "exec"):
            (found if kind == "json" else execs).add(image)
        elif kind == "json" and len(stem.split("-")) == 2 and stem.split("-")[0].isdigit():
            legacy.add(int(stem.split("-")[0]))  # <pid>-<random>.json: an older reporter
    return proctree.Reported(frozenset(found), frozenset(execs), frozenset(legacy))


class Exec(NamedTuple):
    """A process image that ran ``exec``: the program and command line it gave."""

    pid: int
    start: int
    generation: int
    path: str
    argv: List[str]


def read_execs(reports: Path) -> List[Exec]:
    """The exec markers in ``reports`` (``<pid>-<start>-<generation>-<random>.exec``) that read
    well, read as the reports are; the others are left out (the tree's own look then tells)."""
    found: List[Exec] = []
    try:
        names = sorted(os.listdir(reports))
    except OSError:
        return found
    for name in names:
        stem, _, kind = name.partition(".")
        image = _image(stem)
        if image is None or kind != "exec":
            continue
        try:
            data = jsontext.read_regular(os.path.join(reports, name), MAX_REPORT_BYTES)
            value = jsontext.loads(data.decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if not isinstance(value, dict):
            continue
        path, argv = value.get("path"), value.get("argv")
        if isinstance(path, str) and isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            found.append(Exec(image[0], image[1], image[2], path, list(argv)))
    return found
