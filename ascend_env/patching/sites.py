"""Which site-packages a command changes, and whether its transformers needs the patches there.

``--target``, else the site-packages of the installed transformers, else the one that holds
ascend-env's state or this environment's own; a site-packages other environments share is
refused unless named; and whether ``aten::isin`` would fall back to the CPU with the torch_npu
found there, read from its op lists as ``detect`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ascend_env.exceptions import EnvironmentProblem, UsageError

__all__ = [
    "DISTRIBUTION",
    "check_not_shared",
    "default_site_packages",
    "isin_falls_back",
    "resolve_site_packages",
]

DISTRIBUTION = "transformers"


def default_site_packages() -> Path:
    """The site-packages directory that holds the installed transformers distribution (see
    :func:`_site_without_transformers` where there is none)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        return _site_without_transformers()
    return Path(str(dist.locate_file(""))).resolve()


def _site_without_transformers() -> Path:
    """Where transformers is not installed (uninstalled after install, or never there, for a
    hook-only install): the site directory on ``sys.path`` that holds ascend-env's state, else
    this environment's own site-packages (where pip installs)."""
    import sysconfig

    from ascend_env.patching.state import installed_sites

    sites = installed_sites()
    return (sites[0] if sites else Path(sysconfig.get_paths()["purelib"])).resolve()


def check_not_shared(site_packages: Path) -> None:
    """Refuse to change, unasked, a site-packages that other environments share: one outside
    this environment's prefix (a ``--system-site-packages`` venv seeing the system's transformers,
    or a user site-packages that every environment of the user sees)."""
    import sys

    prefix = Path(sys.prefix).resolve()
    if prefix == site_packages or prefix in site_packages.parents:
        return
    raise UsageError(
        f"transformers is in {site_packages}, outside this environment ({prefix}): other "
        "environments share that site-packages, and the patches and the startup hook would change "
        "them all (the hook would also be in no RECORD, so pip uninstall ascend-env would leave it).",
        f"install transformers into this environment (pip install transformers), or pass --target "
        f"{site_packages} to change the shared one on purpose.",
    )


def resolve_site_packages(target: Optional[str]) -> Path:
    """``--target`` as an existing directory, or :func:`default_site_packages`."""
    if target is None:
        return default_site_packages()
    path = Path(target)
    try:
        is_dir = path.is_dir()
    except OSError as exc:  # e.g. a parent directory this user may not enter
        raise EnvironmentProblem(
            f"--target {target}: cannot be read ({exc.strerror}).",
            "pass a site-packages directory this user can read, or run as the user that owns it.",
        ) from None
    if not is_dir:
        raise UsageError(f"--target {target}: no such directory.", "pass a site-packages directory.")
    return path.resolve()


def isin_falls_back(site_packages: Path, search_sys_path: bool = False) -> Optional[bool]:
    """Whether ``aten::isin`` would fall back to the CPU: None when torch_npu is not installed.

    Looks for torch_npu in ``site_packages`` (then on ``sys.path`` when ``search_sys_path``) and
    reads its op lists as ``detect`` does. Raises when they cannot tell.
    """
    import sys

    from ascend_env.detect.report import read_isin, read_package

    paths = [site_packages] + ([Path(p) for p in sys.path if p] if search_sys_path else [])
    torch_npu = read_package("torch_npu", "torch_npu", paths)
    if not torch_npu.installed:
        return None
    isin = read_isin(torch_npu)
    if isin.falls_back is None:
        raise EnvironmentProblem(
            f"cannot tell whether isin falls back to the CPU: {isin.reason}",
            "reinstall torch_npu, or choose explicitly with --patches always or --patches never.",
        )
    return isin.falls_back
