"""What ``verify`` decides, as records: each smoke test process (:class:`Smoke`), each check of the
verdict (:class:`Check`), the evidence of each fallback (:class:`Fallback`), and the verdict
(:class:`VerifyResult`, whose :meth:`~VerifyResult.to_dict` is ``verify --json``'s document).
:mod:`ascend_env.checks.verdict` makes them; imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Sequence

from ascend_env.checks.smoke import IMPORTS
from ascend_env.checks.smoke_report import Installation, SmokeReport, WarningRecord

if TYPE_CHECKING:
    from ascend_env.hook.runtime import HookStatus

__all__ = ["SCHEMA", "Check", "Device", "Fallback", "Smoke", "VerifyResult"]

#: 2: ``device`` may be ``emulated_cann`` (the real torch_npu binary on the emulated CANN); the
#: ``backend`` and ``not_proven`` keys.
SCHEMA = 2
Device = Literal["npu", "simulator", "emulated_cann"]


@dataclass
class Smoke:
    """One smoke test process: what it was asked, its report, and its fd 2."""

    device: str
    steps: Sequence[str]
    report: SmokeReport = field(default_factory=lambda: SmokeReport())
    stderr: str = ""
    returncode: int = 0
    seconds: float = 0.0
    imports: str = IMPORTS[0]


@dataclass(frozen=True)
class Check:
    """One line of the verdict: a named check, whether it passed, why, and what to do if not."""

    name: str
    ok: bool
    detail: str
    fix: Optional[str] = None

    @classmethod
    def passed(cls, name: str, detail: str) -> Check:
        return cls(name, True, detail)

    @classmethod
    def failed(cls, name: str, detail: str, fix: Optional[str]) -> Check:
        return cls(name, False, detail, fix)

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "fix": None if self.ok else self.fix}


@dataclass
class Fallback:
    """The evidence that one op fell back to the CPU, from every run.

    ``line``: torch_npu's CAUTION line reached fd 2 (or a Python warning); ``refused``: an error
    from ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` named it; ``count``: the simulator's count (None on
    a real device); ``steps``: the smoke test's steps it was seen in.
    """

    line: bool = False
    refused: bool = False
    count: Optional[int] = None
    steps: List[str] = field(default_factory=list)

    def seen_in(self, step: str) -> None:
        self.steps = sorted({*self.steps, step})

    def to_dict(self) -> Dict[str, Any]:
        return {"line": self.line, "refused": self.refused, "count": self.count, "steps": list(self.steps)}


@dataclass
class VerifyResult:
    """The verdict on the smoke test's runs; :meth:`to_dict` is the ``--json`` document."""

    ok: bool
    device: Device
    device_name: Optional[str]
    release: Optional[str]
    simulator_reason: Optional[str]
    strict: bool
    fallback_disable: bool
    processes: int
    checks: List[Check]
    fallbacks: Dict[str, Fallback]
    findings: List[str]
    installation: Installation
    hook: Optional[HookStatus]
    warnings: List[WarningRecord]
    import_paths: List[Dict[str, Any]] = field(default_factory=list)
    not_proven: List[str] = field(default_factory=list)
    python: Optional[str] = None  # set by verify(), with seconds; judge() alone leaves both out
    seconds: Optional[float] = None

    def ran_on(self) -> str:
        """What the smoke test ran on, as the verdict line names it."""
        if self.device == "npu":
            return f"a real Ascend NPU ({self.device_name}, torch_npu {self.release})"
        if self.device == "emulated_cann":
            return f"the real torch_npu {self.release} binary on the emulated CANN, not a real NPU"
        if self.release:
            return f"the simulator, not a real NPU (torch_npu {self.release} op table)"
        return "the simulator, not a real NPU"

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "ok": self.ok,
            "schema": SCHEMA,
            "device": self.device,
            "device_name": self.device_name,
            "release": self.release,
            "simulator_reason": self.simulator_reason,
            "strict": self.strict,
            "fallback_disable": self.fallback_disable,
            "processes": self.processes,
            "checks": [check.to_dict() for check in self.checks],
            "fallbacks": {op: item.to_dict() for op, item in self.fallbacks.items()},
            "findings": list(self.findings),
            "installation": self.installation,
            "hook": self.hook,
            "import_paths": list(self.import_paths),
            "warnings": list(self.warnings),
            "backend": {"kind": self.device, "release": self.release, "words": self.ran_on()},
            "not_proven": list(self.not_proven),
        }
        if self.python is not None:
            data["python"] = self.python
        if self.seconds is not None:
            data["seconds"] = self.seconds
        return data
