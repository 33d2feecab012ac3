"""The audit on the emulated CANN (``audit --cann emulated``): the real torch_npu binary, not the
simulator, in every Python process of the command; what the binary itself said.

- :func:`environment`: the audited processes' variables: the audit's report directory, no
  simulator, ``$ASCEND_ENV_AUDIT_CANN=emulated`` (``ascend_env._audited`` then puts the emulated
  CANN under the real ``import torch_npu``), the unpacked wheel first on ``PYTHONPATH``;
- :class:`Fd2`: the command's fd 2, read line by line as it is copied to the user: torch_npu's
  CAUTION lines (``npu_cpu_fallback`` prints one per op per process: Ascend/pytorch
  torch_npu/csrc/aten/VariableFallbackKernel.cpp, 0697d41da0b82924e3459413cacb291c2534c3e5) and
  the emulated CANN's line for each entry point it does not implement;
- :func:`judge`: the findings of :func:`ascend_env.checks.findings.findings_from` completed with
  that evidence: ``fallbacks`` counts CAUTION lines (the processes an op fell back in, at least
  once each: the binary says no more, so calls are not counted), and ``not_proven`` lists what
  keeps the run from proving anything: an entry point the emulated CANN lacks, a process whose
  warnings were silenced or whose fd 2 went elsewhere (its lines could not be read).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ascend_env import _audited
from ascend_env.checks.findings import Findings, plural
from ascend_env.checks.torch_npu_wheel import Choice
from ascend_env.checks.verdict import fallback_lines
from ascend_env.sim import emulated, startup
from ascend_env.sim.reports import ProcessReport

__all__ = ["BACKEND", "Fd2", "backend_words", "cann_text", "environment", "judge"]

#: ``backend.kind`` in the reports and ``--json`` documents of a run on the emulated CANN.
BACKEND = "emulated_cann"


def backend_words(release: str) -> str:
    """How verdict lines name the real binary on the emulated CANN."""
    return f"the real torch_npu {release} binary on the emulated CANN"


def environment(
    choice: Choice, reports: Path, soc: Optional[str], base: Optional[Mapping[str, str]] = None
) -> Dict[str, str]:
    """``base`` (default: this process's environment) set up for a command audited on the
    emulated CANN with ``choice``'s torch_npu, each Python process reporting to ``reports``."""
    env = dict(os.environ if base is None else base)
    for key in startup.VARIABLES:
        env.pop(key, None)
    env[_audited.REPORTS] = str(reports)
    env[_audited.CANN] = emulated.CANN_EMULATED
    env[_audited.LABEL] = choice.label
    if soc:
        env[emulated.SOC_VARIABLE] = soc
    front = [_audited.shim_path()] + ([str(choice.path)] if choice.path is not None else [])
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(front + ([path] if path else []))
    return env


class Fd2:
    """What the command wrote to fd 2 that the audit reads: each CAUTION line's op, in order (an op
    twice: two processes), and the entry points the emulated CANN said it lacks."""

    def __init__(self) -> None:
        self.caution: List[str] = []
        self.unimplemented: List[str] = []

    def line(self, raw: bytes) -> None:
        """One line of fd 2 (the tee's reader)."""
        text = raw.decode("utf-8", "replace")
        if "CAUTION" in text:
            self.caution += fallback_lines(text)
        if "emulated CANN" in text:
            self.unimplemented += [n for n in emulated.unimplemented_in(text) if n not in self.unimplemented]


def judge(
    findings: Findings,
    choice: Choice,
    fd2: Fd2,
    identity: Tuple[int, int],
    reports: Sequence[ProcessReport],
) -> Findings:
    """``findings`` made the findings of a run on the emulated CANN (see the module's docstring)."""
    lines: Dict[str, int] = {}
    for op in fd2.caution:
        lines[op] = lines.get(op, 0) + 1
    findings["fallbacks"] = dict(sorted(lines.items(), key=lambda item: (-item[1], item[0])))
    not_proven: List[str] = []
    missing = list(fd2.unimplemented)
    real = [r for r in reports if "unaudited" not in r and "error" not in r and r.get("torch")]
    for report in real:
        cann = report.get("cann")
        found = emulated.unimplemented(cann) if isinstance(cann, Mapping) else []
        missing += [name for name in found if name not in missing]
    for name in missing:
        not_proven.append(f"the emulated CANN does not implement {name}, which the binary called")
    for report in real:
        who = f"pid {report.get('pid')}"
        if report.get("silenced"):
            not_proven.append(
                f"{who} silenced torch_npu's warnings (RANK other than 0, TORCH_NPU_DISABLED_WARNING, "
                "TORCH_CPP_LOG_LEVEL): its CAUTION lines never reached fd 2"
            )
        fd = report.get("fd2")
        if report.get("end") is not None and isinstance(fd, list) and tuple(fd) != identity:
            not_proven.append(f"{who} wrote its fd 2 elsewhere (redirected): its CAUTION lines were not read")
    findings["backend"] = {
        "kind": BACKEND,
        "release": choice.release,
        "source": choice.source,
        "wheel": None if choice.wheel is None else str(choice.wheel),
        "words": backend_words(choice.release),
    }
    findings["fallbacks_counted"] = "processes"
    findings["not_proven"] = not_proven
    findings["unimplemented"] = missing
    findings["cann"] = _summed(real)
    return findings


def cann_text(findings: Mapping[str, Any]) -> List[str]:
    """The report's lines on the emulated CANN's counters (what the binary asked of CANN)."""
    cann = findings.get("cann") or {}
    lines = []
    aclnn = cann.get("aclnn") or {}
    aclop = cann.get("aclop") or {}
    if aclnn or aclop:
        lines.append(
            f"the binary ran {plural(sum(aclnn.values()), 'aclnn kernel call')} "
            f"({plural(len(aclnn), 'kernel')}) and "
            f"{plural(sum(aclop.values()), 'aclopCompileAndExecute call')} "
            f"({plural(len(aclop), 'op type')}: online compiles on a real NPU) on the emulated CANN"
        )
    for name in findings.get("unimplemented") or []:
        lines.append(f"the emulated CANN does not implement {name}: the run is not proven")
    return lines


def _summed(reports: Sequence[ProcessReport]) -> Dict[str, Dict[str, int]]:
    """The emulated CANN's counters over every process: ``{kind: {name: n}}``."""
    total: Dict[str, Dict[str, int]] = {}
    for report in reports:
        cann = report.get("cann")
        counters = cann.get("counters") if isinstance(cann, Mapping) else None
        if not isinstance(counters, Mapping):
            continue
        for kind, names in counters.items():
            if not isinstance(names, Mapping):
                continue
            into = total.setdefault(str(kind), {})
            for name, count in names.items():
                into[str(name)] = into.get(str(name), 0) + int(count)
    return {kind: dict(sorted(names.items())) for kind, names in sorted(total.items())}
