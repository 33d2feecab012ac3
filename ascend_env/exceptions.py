"""Every error ascend-env raises on purpose.

Each message names the problem and what to do about it. ``exit_code`` is what the
CLI returns: 1 when a check failed, 2 for a usage or environment error.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "REINSTALL_ASCEND_ENV",
    "AscendEnvError",
    "CheckFailed",
    "EnvironmentProblem",
    "HunkMismatch",
    "PatchError",
    "UsageError",
    "reinstall",
    "reinstall_over",
]


def reinstall(name: str, version: Optional[str] = None) -> str:
    """The pip command that puts distribution ``name`` back as its wheel has it, ``version`` pinned
    (a placeholder such as ``<version>`` where it is not known); dependencies are left alone."""
    return f"pip install --force-reinstall --no-deps {name}{'==' + version if version else ''}"


#: ascend-env is not on PyPI: it is put back from the wheel or clone it came from.
REINSTALL_ASCEND_ENV = "pip install --force-reinstall <the ascend-env wheel or clone it came from>"


def reinstall_over(name: str, version: str) -> str:
    """The pip command that writes distribution ``name`` ``version`` over the installed one
    without uninstalling it first: where its RECORD is gone, pip cannot uninstall it, so
    ``--force-reinstall`` fails. ascend-env comes from the wheel or clone it came from."""
    if name.lower().replace("_", "-") == "ascend-env":
        source = f"<the ascend-env {version} wheel or clone it came from>"
    else:
        source = f"{name}=={version}"
    return f"pip install --ignore-installed --no-deps {source}"


class AscendEnvError(Exception):
    """Base class. ``problem`` says what is wrong, ``fix`` what to do."""

    exit_code = 2

    def __init__(self, problem: str, fix: Optional[str] = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem}\n  fix: {fix}")

    def to_dict(self) -> dict[str, Any]:
        return {"error": type(self).__name__, "problem": self.problem, "fix": self.fix}


class UsageError(AscendEnvError):
    """The command line was wrong."""


class EnvironmentProblem(AscendEnvError):
    """The environment cannot be read or changed as asked."""


class CheckFailed(AscendEnvError):
    """A check ran and found a problem."""

    exit_code = 1


class PatchError(AscendEnvError):
    """A patch file is malformed or hostile, or cannot be applied as written."""


class HunkMismatch(PatchError):
    """A hunk's expected lines are not in the target file."""

    def __init__(
        self,
        problem: str,
        fix: Optional[str] = None,
        *,
        path: str = "",
        hunk: int = 0,
        line: int = 0,
        expected: tuple[Any, ...] = (),
        found: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(problem, fix)
        self.path = path
        self.hunk = hunk
        self.line = line
        self.expected = expected
        self.found = found

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data.update(
            path=self.path,
            hunk=self.hunk,
            line=self.line,
            expected=list(self.expected),
            found=list(self.found),
        )
        return data
