"""Which op table the simulated NPU runs for ``audit`` (and verify's simulated smoke test): a named
release, several, every affected one, the installed torch_npu's own op lists, or the oldest
release; and the environment that tells the audited processes.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path
from typing import Dict, List, Mapping, NamedTuple, Optional

from packaging.version import InvalidVersion, Version

from ascend_env import _audited
from ascend_env.exceptions import UsageError
from ascend_env.sim import optables, startup

__all__ = [
    "AFFECTED",
    "Table",
    "affected_releases",
    "audited_environment",
    "choose_table",
    "installed_torch_npu",
    "releases_asked",
]

#: ``--torch-npu affected``: every release that lacks an NPU kernel ascend-env registers for an op
#: that transformers' generation reaches.
AFFECTED = "affected"
# torch_npu's first release with a torch.backends entry point (Ascend/pytorch v2.5.1-7.0.0 setup.py).
_AUTOLOAD_FROM = Version("2.5.1")


def affected_releases() -> List[str]:
    """The releases with a table that lack an NPU kernel ascend-env registers for an op that
    generation reaches (the registry's fixes marked ``generation``): 2.1.0.post3 to 2.1.0.post6,
    2.2.x and 2.3.1."""
    from ascend_env.kernels.registry import FIXES

    return [r for r in optables.releases() if any(fix.needed_by(r) for fix in FIXES if fix.generation)]


def releases_asked(value: Optional[str]) -> List[Optional[str]]:
    """``--torch-npu``'s releases: one, several comma-separated, or ``affected``; ``[None]`` when
    none was named (the installed torch_npu, else the oldest release)."""
    if value is None:
        return [None]
    chosen: List[Optional[str]] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        found = affected_releases() if part.lower() == AFFECTED else [optables.canonical(part)]
        chosen += [release for release in found if release not in chosen]
    if not chosen:
        raise UsageError(
            f"--torch-npu {value!r} names no release.",
            f"name one or more, e.g. --torch-npu 2.1.0.post6,2.2.0, or --torch-npu {AFFECTED}",
        )
    return chosen


def installed_torch_npu() -> Optional[Path]:
    """The package directory of the torch_npu installed in this Python, without importing it."""
    try:
        spec = importlib.util.find_spec("torch_npu")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


class Table(NamedTuple):
    """The op table a simulated process runs: its name for the report (``label``), why it was
    chosen (``chosen``: ``given``, ``installed`` or ``oldest``), whether the release is loaded by
    ``import torch`` itself (``autoloads``), and the variables that tell the simulator
    (``env``: :data:`ascend_env.sim.startup.VARIABLES`, read by
    :func:`ascend_env.sim.startup.enable`)."""

    label: str
    chosen: str
    autoloads: bool
    env: Dict[str, str]


def choose_table(torch_npu: Optional[str]) -> Table:
    """The op table the audited processes (and verify's simulated smoke test) run.

    An explicit release wins; otherwise the installed torch_npu's own YAML op lists; otherwise the
    oldest release with a table: it lacks the kernels the affected releases lack, where a newer one
    would hide their fallbacks.
    """
    if torch_npu:
        version = optables.canonical(torch_npu)
        return Table(version, "given", _autoloads(version), {startup.TORCH_NPU: version})
    package = installed_torch_npu()
    if package is not None:
        try:
            version = importlib.metadata.version("torch_npu")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        try:
            disable = optables.has_fallback_disable(version)
        except UsageError:
            disable = False
        label = f"{version} (installed, {package})"
        env = {
            startup.OPLISTS: str(package),
            startup.LABEL: label,
            startup.FALLBACK_DISABLE: "1" if disable else "0",
        }
        return Table(label, "installed", _installed_autoloads(), env)
    version = optables.releases()[0]
    return Table(version, "oldest", _autoloads(version), {startup.TORCH_NPU: version})


def _autoloads(version: str) -> bool:
    """Whether torch_npu ``version`` has a ``torch.backends`` entry point (>= 2.5.1)."""
    try:
        return Version(version) >= _AUTOLOAD_FROM
    except InvalidVersion:
        return False


def _installed_autoloads() -> bool:
    """Whether the installed torch_npu declares a ``torch.backends`` entry point."""
    try:
        points = importlib.metadata.distribution("torch_npu").entry_points
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(point.group == "torch.backends" for point in points)


def audited_environment(
    table: Table, reports: Path, base: Optional[Mapping[str, str]] = None
) -> Dict[str, str]:
    """``base`` (default: this process's environment) set up for a command audited on ``table``,
    each of its Python processes reporting to the directory ``reports``."""
    env = dict(os.environ if base is None else base)
    for key in startup.VARIABLES:
        env.pop(key, None)
    env.update(table.env)
    env[_audited.REPORTS] = str(reports)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _audited.shim_path() + (os.pathsep + path if path else "")
    # torch loads backends at import unless this is "0" (torch/__init__.py); the simulated release
    # stands in for torch_npu's entry point as the user's setting allows.
    user_autoload = env.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1"
    env[startup.AUTOLOAD] = "1" if table.autoloads and user_autoload else "0"
    # A real torch_npu, if installed, must not claim the PrivateUse1 backend first.
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return env
