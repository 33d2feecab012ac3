"""Every error ascend-env raises on purpose.

Each message names the problem and what to do about it. ``exit_code`` is what the
CLI returns: 1 when a check failed, 2 for a usage or environment error.
"""

from __future__ import annotations

from typing import Optional


class AscendEnvError(Exception):
    """Base class. ``problem`` says what is wrong, ``fix`` what to do."""

    exit_code = 2

    def __init__(self, problem: str, fix: Optional[str] = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem}\n  fix: {fix}")

    def to_dict(self) -> dict:
        return {"error": type(self).__name__, "problem": self.problem, "fix": self.fix}


class UsageError(AscendEnvError):
    """The command line was wrong."""


class NotBuiltError(UsageError):
    """A subcommand exists in the design but has no implementation yet."""


class EnvironmentProblem(AscendEnvError):
    """The environment cannot be read or changed as asked."""


class CheckFailed(AscendEnvError):
    """A check ran and found a problem."""

    exit_code = 1
