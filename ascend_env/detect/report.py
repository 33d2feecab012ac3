"""The environment report behind ``ascend-env detect``: read files and metadata, import nothing.

:func:`detect` returns a :class:`Report`; ``Report.to_dict()`` is the ``--json`` document
(``schema`` 1, documented in docs/detect.md). Broken inputs end up in ``problems``, never as exceptions.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from ascend_env.detect import cann, compat, driver, hook_site, packages, socs
from ascend_env.detect.machine import Kernels, find_kernels, machine_soc
from ascend_env.detect.npu_oplists import ISIN_OVERLOADS, read_torch_npu
from ascend_env.exceptions import AscendEnvError
from ascend_env.kernels.registry import FIXES, OVERLOADS, Fix, Op

__all__ = [
    "FALLBACK_OPS",
    "NO_TORCH_NPU",
    "SCHEMA",
    "CompileMode",
    "FixedOp",
    "Isin",
    "OpLists",
    "Package",
    "Report",
    "detect",
    "read_fixes",
    "read_isin",
    "read_ops",
    "read_package",
]

SCHEMA = 1
FALLBACK_OPS = ("isin.Tensor_Tensor", "isin.Tensor_Tensor_out")
NO_TORCH_NPU = "no torch_npu: isin cannot fall back here"


@dataclass
class Package:
    """One installed distribution, as its metadata describes it."""

    name: str
    version: Optional[str] = None
    location: Optional[Path] = None
    package_dir: Optional[Path] = None
    requires_torch: Optional[str] = None
    shadowed: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)

    @property
    def installed(self) -> bool:
        return self.version is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "installed": self.installed,
            "version": self.version,
            "location": None if self.location is None else str(self.location),
            "package_dir": None if self.package_dir is None else str(self.package_dir),
            "requires_torch": self.requires_torch,
            "shadowed": list(self.shadowed),
            "problems": list(self.problems),
        }


@dataclass
class Isin:
    """Whether ``aten::isin`` has an NPU kernel in the installed torch_npu."""

    falls_back: Optional[bool] = None
    status: str = "unknown"
    reason: str = ""
    native: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    hook_site: Optional[Path] = None
    hook_installed: Optional[bool] = None

    @property
    def install_has_work(self) -> Optional[bool]:
        """Whether ``install`` would put in what ``verify`` requires (:mod:`ascend_env.states`):
        the startup hook, wherever it is not installed; None where whether isin falls back is
        unknown (install then asks for --patches) or no site-packages was found."""
        if self.falls_back is None or self.hook_installed is None:
            return None
        return not self.hook_installed

    def install_reason(self) -> str:
        """Why :attr:`install_has_work` says what it says."""
        if self.falls_back is None:
            return "unknown: whether isin falls back is unknown (install asks for --patches always or never)"
        if self.hook_installed is None:
            return "unknown: no site-packages directory was found"
        if self.hook_installed:
            return f"the startup hook is installed in {self.hook_site} (status tells whether all is in place)"
        why = (
            "it registers an NPU isin where torch_npu has none"
            if self.falls_back
            else "verify requires it; it registers an NPU isin once a torch_npu without one is installed"
            if self.status == "no_torch_npu"
            else "verify requires it; it also guards the compile mode"
        )
        return f"the startup hook is not installed in {self.hook_site} ({why})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "falls_back": self.falls_back,
            "status": self.status,
            "reason": self.reason,
            "native": list(self.native),
            "missing": list(self.missing),
            "install_has_work": self.install_has_work,
            "install_reason": self.install_reason(),
            "hook_installed": self.hook_installed,
        }


@dataclass
class FixedOp:
    """One op that ascend-env fixes (``isin``, ``polar``), for the installed torch_npu.

    ``status``: ``native`` (every overload runs on the NPU, natively or through its ``out=``
    form), ``host_copy`` (registered, but torch_npu's kernel copies to the host and back; a
    registered kernel is never replaced), ``fixed`` (some fall back in torch_npu, and the startup
    hook, installed here, registers ascend-env's kernels for them), ``falls_back`` (some fall
    back and no hook is installed), ``no_torch_npu`` or ``unknown`` (the op lists cannot be read);
    for an op another package defines (torchvision's), ``not_used`` (that package is not
    installed) or ``left_to`` (a package that registers it itself is: torchvision_npu).
    """

    op: str
    status: str = "unknown"
    falls_back: List[str] = field(default_factory=list)  # the overloads without an NPU kernel
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "status": self.status,
            "falls_back": list(self.falls_back),
            "reason": self.reason,
        }


@dataclass
class CompileMode:
    """The compile mode torch_npu would start in here, and whether generation compiles online."""

    soc: Optional[str]
    soc_source: str
    kernels: Kernels
    jit_compile_default: Optional[bool] = None

    @property
    def compiles_online(self) -> Optional[bool]:
        """Whether, left alone, torch_npu compiles ops online at every new shape (None: unknown)."""
        return self.jit_compile_default

    def to_dict(self) -> dict[str, Any]:
        return {
            "soc": self.soc,
            "soc_source": self.soc_source,
            "kernels": {
                "installed": self.kernels.installed,
                "path": self.kernels.path,
                "socs": list(self.kernels.socs),
                "reason": self.kernels.reason or None,
            },
            "jit_compile_default": self.jit_compile_default,
            "compiles_online": self.compiles_online,
        }

    def note(self) -> Optional[str]:
        """What to do when generation would compile online; None when it would not or is unknown."""
        if not self.compiles_online or self.soc is None:
            return None
        said = (
            f"generation will compile ops online on this machine: torch_npu starts {self.soc} with "
            "JIT compile on, so every new input shape (each decoding step) is compiled before it runs"
        )
        if self.kernels.installed:
            return said + (
                "; the binary kernels are installed, so run: python -m ascend_env install "
                "(its startup hook turns JIT compile off in every process)"
            )
        return said + (
            f"; install the binary kernels (Ascend-cann-kernels-{socs.family(self.soc).lower()}), "
            "then run: python -m ascend_env install (its startup hook turns JIT compile off)"
        )


def _read_compile_mode(
    environ: Mapping[str, str], toolkit: cann.Toolkit, npu_smi: Optional[Callable[[], str]] = None
) -> CompileMode:
    """The SoC (``$ASCEND_ENV_SOC`` or ``npu-smi info``), the binary kernels and the JIT default."""
    soc, source = machine_soc(environ, npu_smi)
    kernels = find_kernels(toolkit.root)
    return CompileMode(soc, source, kernels, None if soc is None else socs.jit_compile_default(soc))


@dataclass
class Report:
    """Everything ``detect`` found."""

    python_version: str
    python_implementation: str
    executable: str
    machine: str
    site_packages: List[Path]
    search_path: List[str]
    torch: Package
    torch_npu: Package
    transformers: Package
    toolkit: cann.Toolkit
    driver: driver.Driver
    isin: Isin
    compat: compat.Verdict
    compile_mode: Optional[CompileMode] = None
    notes: List[str] = field(default_factory=list)
    fixes: List[FixedOp] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return self.compat.status

    @property
    def problems(self) -> List[str]:
        """Every problem found, each prefixed with where it was found."""
        found: List[str] = []
        for label, items in (
            ("torch", self.torch.problems),
            ("torch_npu", self.torch_npu.problems),
            ("transformers", self.transformers.problems),
            ("CANN", self.toolkit.problems),
            ("driver", self.driver.problems),
        ):
            found.extend(f"{label}: {item}" for item in items)
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "verdict": self.verdict,
            "python": {
                "version": self.python_version,
                "implementation": self.python_implementation,
                "executable": self.executable,
                "machine": self.machine,
                "site_packages": [str(p) for p in self.site_packages],
            },
            "torch": self.torch.to_dict(),
            "torch_npu": self.torch_npu.to_dict(),
            "transformers": self.transformers.to_dict(),
            "cann": self.toolkit.to_dict(),
            "driver": self.driver.to_dict(),
            "isin": self.isin.to_dict(),
            "fixes": [fixed.to_dict() for fixed in self.fixes],
            "compat": self.compat.to_dict(),
            "compile_mode": None if self.compile_mode is None else self.compile_mode.to_dict(),
            "problems": self.problems,
            "notes": list(self.notes),
        }


def read_package(name: str, import_name: str, paths: Optional[Sequence[Path]]) -> Package:
    """What the metadata of ``name`` says (never raises)."""
    package = Package(name)
    try:
        found = packages.find_all(name, paths)
    except Exception as exc:  # an unreadable site-packages must not stop the report
        package.problems.append(f"cannot list installed distributions ({exc}).")
        return package
    if not found:
        return package
    dist = found[0]
    package.version = packages.version(dist)
    package.location = packages.location(dist)
    package.shadowed = [
        f"{packages.version(other) or '?'} at {packages.location(other)}" for other in found[1:]
    ]
    where = packages.metadata_dir(dist) or package.location
    if package.version is None:
        package.problems.append(
            f"the metadata at {where} has no Version; {name} is reported as not installed."
        )
        return package
    if package.shadowed:
        package.problems.append(
            f"{len(package.shadowed)} more {name} installation(s) are hidden behind this one: "
            + "; ".join(package.shadowed)
        )
    package_dir = packages.package_dir(dist, import_name)
    if package_dir.is_dir():
        package.package_dir = package_dir
    else:
        package.problems.append(f"{name} {package.version} is registered but {package_dir} is missing.")
    requirement = packages.requirement_on(dist, "torch") if name != "torch" else None
    package.requires_torch = None if requirement is None else str(requirement)
    return package


#: torch_npu's op lists as :func:`read_ops` read them: the native ops, or None and why not.
OpLists = Tuple[Optional[FrozenSet[str]], str]


def read_ops(torch_npu: Package) -> OpLists:
    """The ops with a native NPU kernel in the installed torch_npu, read once for the whole
    report; None (with the reason) where there is no torch_npu or its lists cannot be read."""
    if not torch_npu.installed:
        return None, NO_TORCH_NPU
    if torch_npu.package_dir is None:
        return None, f"unknown: torch_npu {torch_npu.version} has no package directory to read."
    try:
        return read_torch_npu(torch_npu.package_dir), ""
    except AscendEnvError as exc:
        return None, f"unknown: {exc.problem}"


def _lacking(overloads: Sequence[Op], ops: FrozenSet[str]) -> List[str]:
    """Of the registry's ``overloads``, those that fall back with these native ``ops``: those
    without a kernel whose other forms lack one too (a functional overload without a kernel still
    runs natively through its out= form). The one computation of that fact, for isin and fixes."""
    return [fix.op for fix in overloads if all(op not in ops for op in fix.when_missing)]


def read_isin(torch_npu: Package, lists: Optional[OpLists] = None) -> Isin:
    """Whether isin falls back to the CPU with this torch_npu (from its op lists: ``lists``, as
    :func:`read_ops` read them, else read here)."""
    if not torch_npu.installed:
        return Isin(falls_back=False, status="no_torch_npu", reason=NO_TORCH_NPU)
    ops, why = read_ops(torch_npu) if lists is None else lists
    if ops is None:
        return Isin(reason=why)
    native = [op for op in ISIN_OVERLOADS if op in ops]
    missing = [op for op in ISIN_OVERLOADS if op not in ops]
    lacking = [op for op in _lacking(OVERLOADS, ops) if op in FALLBACK_OPS]
    if lacking:
        reason = (
            f"torch_npu {torch_npu.version} has no NPU kernel for {', '.join(lacking)}: every "
            "transformers decoding step runs isin on the CPU unless the startup hook registers one"
        )
        return Isin(True, "falls_back", reason, native, missing)
    reason = f"torch_npu {torch_npu.version} runs isin natively on the NPU"
    return Isin(False, "native", reason, native, missing)


def _not_applicable(fix: Fix, paths: Optional[Sequence[Path]]) -> Optional[FixedOp]:
    """For a fix whose op another package defines (``requires``: torchvision): ``not_used`` where
    that package is not installed (the op does not exist), ``left_to`` where a package that
    registers it itself is (``registered_by``); else None."""
    if fix.requires is None:
        return None
    owner = next((name for name in fix.registered_by if packages.find(name, paths) is not None), None)
    if owner is not None:
        return FixedOp(
            fix.name, "left_to", [], f"{owner} registers {fix.name} itself; ascend-env leaves it to it"
        )
    if packages.find(fix.requires, paths) is None:
        return FixedOp(
            fix.name, "not_used", [], f"{fix.requires} is not installed: no {fix.name} op to fall back"
        )
    return None


def read_fixes(
    torch_npu: Package,
    sites: Sequence[Path],
    lists: Optional[OpLists] = None,
    paths: Optional[Sequence[Path]] = None,
) -> List[FixedOp]:
    """Per op of the registry (:data:`ascend_env.kernels.registry.FIXES`): native, fixed by
    the startup hook installed in one of ``sites``, or falling back, from torch_npu's op lists
    (``lists``, as :func:`read_ops` read them, else read here)."""
    names = [fix.name for fix in FIXES]
    if not torch_npu.installed:
        return [FixedOp(op, "no_torch_npu", [], "no torch_npu: nothing falls back") for op in names]
    ops, why = read_ops(torch_npu) if lists is None else lists
    if ops is None:
        return [FixedOp(op, "unknown", [], why) for op in names]
    hooked = [site for site in sites if hook_site.installed(site)]
    release = f"torch_npu {torch_npu.version}"
    found = []
    for fix in FIXES:
        family = fix.name
        elsewhere = _not_applicable(fix, paths)
        if elsewhere is not None:
            found.append(elsewhere)
            continue
        lacking = _lacking(fix.ops, ops)
        copied = [op.op for op in fix.ops if fix.copies_to_host(torch_npu.version)]
        if not lacking and copied:
            found.append(
                FixedOp(
                    family,
                    "host_copy",
                    [],
                    f"{release} registers {family}, but its kernel "
                    "copies to the host and back (op-plugin); ascend-env leaves it alone",
                )
            )
        elif not lacking:
            found.append(FixedOp(family, "native", [], f"{release} runs {family} on the NPU"))
        elif hooked:
            found.append(
                FixedOp(
                    family,
                    "fixed",
                    lacking,
                    f"no NPU kernel in {release}; the startup hook in {hooked[0]} registers ascend-env's",
                )
            )
        else:
            found.append(
                FixedOp(
                    family,
                    "falls_back",
                    lacking,
                    f"no NPU kernel in {release} and no startup hook; run: python -m ascend_env install",
                )
            )
    return found


def detect(
    paths: Optional[Sequence[Path]] = None,
    environ: Optional[Mapping[str, str]] = None,
    prefixes: Optional[Sequence[Path]] = None,
    install_info: Path = driver.INSTALL_INFO,
    driver_prefix: Path = cann.SYSTEM_PREFIX,
    machine: Optional[str] = None,
    python_version: Optional[Sequence[int]] = None,
    table: Optional[compat.Table] = None,
    npu_smi: Optional[Callable[[], str]] = None,
) -> Report:
    """Build the report.

    ``paths`` are the directories to search for distributions (default: ``sys.path``);
    ``environ`` the environment (default: ``os.environ``); ``prefixes`` the Ascend install
    prefixes (default: ``/usr/local/Ascend`` then ``$HOME/Ascend``); ``machine`` and
    ``python_version`` default to the running interpreter's; ``npu_smi`` returns ``npu-smi
    info``'s output (default: run it, at most 5 s).
    """
    environ = os.environ if environ is None else environ
    machine = machine or platform.machine()
    version_info = tuple(python_version or sys.version_info[:3])
    torch = read_package("torch", "torch", paths)
    torch_npu = read_package("torch_npu", "torch_npu", paths)
    transformers = read_package("transformers", "transformers", paths)
    toolkit = cann.find_toolkit(environ, prefixes, machine)
    found_driver = driver.find_driver(install_info, driver_prefix)
    lists = read_ops(torch_npu)  # once: the isin line and the fixes say the same fact from it
    isin = read_isin(torch_npu, lists)
    site_packages = packages.site_packages() if paths is None else list(paths)
    isin.hook_site = transformers.location or (site_packages[0] if site_packages else None)
    if isin.hook_site is not None:
        isin.hook_installed = bool(hook_site.installed(isin.hook_site))
    compile_mode = _read_compile_mode(environ, toolkit, npu_smi)
    verdict = _compat_verdict(table, torch, torch_npu, toolkit, version_info)
    notes = _notes(environ, torch_npu, toolkit, compile_mode)
    return Report(
        python_version=".".join(str(n) for n in version_info),
        python_implementation=platform.python_implementation(),
        executable=sys.executable,
        machine=machine,
        site_packages=site_packages,
        search_path=packages.search_path(paths),
        torch=torch,
        torch_npu=torch_npu,
        transformers=transformers,
        toolkit=toolkit,
        driver=found_driver,
        isin=isin,
        compat=verdict,
        compile_mode=compile_mode,
        notes=notes + list(verdict.notes),
        fixes=read_fixes(torch_npu, site_packages, lists, paths),
    )


def _compat_verdict(
    table: Optional[compat.Table],
    torch: Package,
    torch_npu: Package,
    toolkit: cann.Toolkit,
    version_info: Sequence[int],
) -> compat.Verdict:
    """The compatibility table's verdict on these versions; ``unknown`` when the table cannot be read."""
    try:
        table = compat.load() if table is None else table
        return compat.verdict(
            table,
            torch_npu.version,
            torch.version,
            toolkit.version if toolkit.found else None,
            compat.python_line(version_info),
            torch_npu.requires_torch,
        )
    except AscendEnvError as exc:
        verdict = compat.Verdict()
        verdict.add("table", compat.UNKNOWN, exc.problem)
        return verdict


def _notes(
    environ: Mapping[str, str], torch_npu: Package, toolkit: cann.Toolkit, compile_mode: CompileMode
) -> List[str]:
    """What to do about what was found, before the compatibility table's own notes."""
    note = compile_mode.note()
    notes: List[str] = [] if note is None else [note]
    if torch_npu.installed and not toolkit.found:
        notes.append(
            "without CANN, 'import torch' fails once torch_npu >= 2.5.1 is installed (it loads "
            "itself as a torch backend); set TORCH_DEVICE_BACKEND_AUTOLOAD=0 to import torch anyway."
        )
    if toolkit.found and toolkit.origin.startswith("default path") and not environ.get("ASCEND_HOME_PATH"):
        script = cann.set_env_script(toolkit.root) if toolkit.root else None
        notes.append(
            f"ASCEND_HOME_PATH is not set: run 'source {script or '<CANN root>/set_env.sh'}' "
            "before using torch_npu."
        )
    return notes
