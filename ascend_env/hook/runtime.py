"""What the startup hook does once an NPU backend is loaded, and the record of it.

:func:`activate` runs after ``torch_npu`` has been imported (the simulator's stand-in too), and
again after each module whose import defines a fixed op (``torchvision``, :func:`awaited_imports`;
:mod:`ascend_env.hook.watch` hears of it). For every overload of every fix in
:mod:`ascend_env.kernels.registry` whose op exists, that no installed package registers itself
(``registered_by``) and that has no kernel for its fix's key in its fix's namespace (nor its
``out=`` form), it registers the kernel of the fix's module with ``torch.library``, importing only
the modules of the fixes needed. Ops that already have a kernel (a native one, or one registered
earlier) are left alone, so PyTorch never warns "Overriding a previously registered kernel"; an
op that PyTorch decomposes (``CompositeImplicitAutograd``) is refused with an error.
:func:`status` is the in-process record.

Its functions import torch when they run; importing the module does not. The hook's ``notify``
(:mod:`ascend_env.hook.watch`) calls :func:`activate`; ``status``'s probe, the smoke test and the
simulator read :func:`status`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Protocol,
    TextIO,
    Tuple,
    TypedDict,
)

from ascend_env.hook import files

if TYPE_CHECKING:
    from ascend_env.hook import compile_guard
    from ascend_env.kernels.registry import Fix, Op

__all__ = [
    "DISPATCH_KEY",
    "RECORD",
    "HookStatus",
    "Simulator",
    "activate",
    "awaited_imports",
    "guard_compile_mode",
    "has_kernel",
    "installed_sites",
    "register_simulator",
    "status",
    "warn_on_drift",
]

DISPATCH_KEY = "PrivateUse1"


class _Record:
    """Everything :func:`activate` did in this process. One instance, :data:`RECORD`."""

    def __init__(self) -> None:
        self.libraries: Dict[str, Any] = {}  # the torch.library.Library per namespace; kept alive
        self.release: Optional[str] = None
        self.registered: List[str] = []
        self.native: List[str] = []
        self.errors: List[str] = []
        self.drift: List[str] = []
        self.warned = False
        self.compile_guard: Optional[Dict[str, Any]] = None  # what the guard did, once per process


RECORD = _Record()


class Simulator(Protocol):
    """The simulated NPU, as the hook sees it. The simulator sits above the hook: it registers
    itself (:func:`register_simulator`, from :func:`ascend_env.sim.enable_ops`), and the hook never
    imports it. ``config`` stands for ``torch.npu.config``."""

    config: Any

    def table(self) -> Optional[str]:
        """The op table the simulator runs in this process, or None."""
        ...

    def soc_and_source(self) -> Tuple[Optional[str], str]:
        """The simulated SoC, and where it came from."""
        ...

    def set_compile_mode(self, jit_compile: bool = True) -> None:
        """``torch_npu.npu.set_compile_mode``."""
        ...


#: The simulator registered in this process (at most one).
_SIMULATOR: List[Simulator] = []


def register_simulator(simulator: Simulator) -> None:
    """Tell the hook of the simulated NPU in this process (called when it enables a table)."""
    _SIMULATOR[:] = [simulator]


def _simulator() -> Optional[Simulator]:
    """The simulated NPU, where it runs a table in this process."""
    return next((simulator for simulator in _SIMULATOR if simulator.table() is not None), None)


def _backend_release() -> Optional[str]:
    """The release of the torch_npu imported in this process (the simulator's stand-in gives the
    simulated one), when it can be told."""
    module = sys.modules.get("torch_npu")
    version = getattr(module, "__version__", None)
    return version if isinstance(version, str) else None


def has_kernel(op: str, key: str = DISPATCH_KEY) -> bool:
    """Whether ``op`` (``namespace::name.overload``) has a kernel registered for ``key``."""
    import torch

    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op, key))


def installed_sites(paths: Optional[List[str]] = None) -> List[Path]:
    """The directories of ``paths`` (default ``sys.path``) where ``install`` left a state file
    (:func:`ascend_env.patching.state.installed_sites`, imported when called)."""
    import ascend_env.patching.state

    return ascend_env.patching.state.installed_sites(paths)


def warn_on_drift(stream: TextIO, paths: Optional[List[str]] = None) -> List[str]:
    """Print one line to ``stream`` when installed patches no longer hold (once per process)."""
    from ascend_env.patching.records import find_distribution
    from ascend_env.patching.state import drift

    lines: List[str] = []
    removed = False  # transformers uninstalled since install: install cannot help, restore can
    for site in installed_sites(paths):
        found = drift(site)
        lines.extend(f"{site}: {line}" for line in found)
        removed = removed or bool(found and find_distribution(site, "transformers") is None)
    RECORD.drift = lines
    if lines and not RECORD.warned:
        RECORD.warned = True
        if removed:
            advice = "transformers was uninstalled since; run: python -m ascend_env restore"
        else:
            advice = "generation may fall back to the CPU again. Run: python -m ascend_env install"
        changed = f"{len(lines)} patched file(s) changed since install ({lines[0]})"
        stream.write(f"ascend-env: {changed}; {advice}\n")
    return lines


def _record_error(what: str, exc: Exception) -> None:
    """Keep ``exc`` in :func:`status`'s errors: nothing the hook does may raise into an import."""
    RECORD.errors.append(f"{what}: {type(exc).__name__}: {exc}")


def _lacks_kernel(op: Op) -> bool:
    """Whether none of the overloads ``op`` stands in for has a kernel for its fix's key; else
    ``op`` is native. An op that PyTorch decomposes (``CompositeImplicitAutograd``) never reaches
    the key: registering it would change what it does, so it is an error."""
    fix = op.fix
    try:
        if has_kernel(op.qualified_name, "CompositeImplicitAutograd"):
            raise ValueError(f"{op.qualified_name} is decomposed by PyTorch; a kernel would override it")
        if all(not has_kernel(f"{fix.namespace}::{name}", fix.dispatch_key) for name in op.when_missing):
            return True
        if op.op not in RECORD.registered and op.op not in RECORD.native:
            RECORD.native.append(op.op)
    except Exception as exc:
        _record_error(op.op, exc)
    return False


def _ready(fix: Fix) -> bool:
    """Whether ``fix``'s op exists in this process (the module that defines it was imported) and
    no installed package registers it itself (``registered_by``: left to that package)."""
    if fix.requires is not None and fix.requires not in sys.modules:
        return False
    if fix.registered_by:
        import importlib.util

        for package in fix.registered_by:
            try:
                found = package in sys.modules or importlib.util.find_spec(package) is not None
            except (ImportError, ValueError):
                found = False
            if found:
                RECORD.native.extend(op.op for op in fix.ops if op.op not in RECORD.native)
                return False
    return True


def awaited_imports() -> List[str]:
    """The modules whose import defines an op a fix registers, not imported yet in this process
    (``torchvision``): the hook watches for them (:mod:`ascend_env.hook.watch`)."""
    from ascend_env.kernels.registry import FIXES

    names = [fix.requires for fix in FIXES if fix.requires is not None and fix.requires not in sys.modules]
    return list(dict.fromkeys(names))


def _library(namespace: str) -> Any:
    """The ``torch.library.Library`` that owns our kernels of ``namespace``, made on first use and
    kept alive."""
    if namespace not in RECORD.libraries:
        import torch

        # torch.library.Library.__init__ has no annotations.
        RECORD.libraries[namespace] = torch.library.Library(namespace, "IMPL")  # type: ignore[no-untyped-call]
    return RECORD.libraries[namespace]


def _register(op: Op, kernels: Mapping[str, Callable[..., Any]]) -> bool:
    """Register the kernel of ``op``; whether that worked."""
    try:
        _library(op.fix.namespace).impl(op.op, kernels[op.op], op.fix.dispatch_key)
    except Exception as exc:  # one failed op must not stop the others
        _record_error(op.op, exc)
        return False
    RECORD.registered.append(op.op)
    return True


def _kernels(fix: Fix) -> Mapping[str, Callable[..., Any]]:
    """``fix``'s kernels, importing its module; none (and the error recorded) when that fails."""
    from ascend_env.kernels import registry

    try:
        return registry.kernels([fix])
    except Exception as exc:
        _record_error(f"{fix.name} ({fix.module})", exc)
        return {}


def _guard_record(source: str) -> Dict[str, Any]:
    """What the compile-mode guard did, as :func:`status` reports it."""
    try:
        return guard_compile_mode(source).to_dict()
    except Exception as exc:  # the guard never breaks the import of torch_npu
        return {"apply": False, "applied": False, "reason": "failed", "error": f"{type(exc).__name__}: {exc}"}


def activate(source: str) -> List[str]:
    """Register every fix whose op lacks an NPU kernel; return the ops registered now.

    Also warns, in one line on stderr, when the installed patches drifted.
    """
    # Imported before anything is recorded: one that fails to import raises to the caller (notify),
    # torch first, so that a broken torch is what the error names.
    import torch  # noqa: F401

    from ascend_env.kernels import registry

    RECORD.release = _backend_release() or RECORD.release
    # Decide every overload before registering any: registering an out= kernel changes whether
    # its functional overload still falls back. Only the modules of the fixes needed are imported.
    wanted = [op for fix in registry.FIXES if _ready(fix) for op in fix.ops if _lacks_kernel(op)]
    kernels = {fix.name: _kernels(fix) for fix in dict.fromkeys(op.fix for op in wanted)}
    registered = [op.op for op in wanted if kernels[op.fix.name] and _register(op, kernels[op.fix.name])]
    try:
        warn_on_drift(sys.stderr)
    except Exception as exc:
        _record_error("drift check", exc)
    if RECORD.compile_guard is None:
        RECORD.compile_guard = _guard_record(source)
    return registered


def guard_compile_mode(source: str) -> compile_guard.Decision:
    """Apply the compile-mode guard in this process, as the installed hook module says.

    On the simulated NPU (enabled in this process, whatever imported it) the SoC is the simulated
    one and the settings are the simulator's; else torch_npu's own API is called.
    """
    from ascend_env.hook import compile_guard

    boot = files.running()
    enabled = bool(getattr(boot, "COMPILE_GUARD", True))
    simulator = _simulator()
    if simulator is not None:
        decision = compile_guard.from_environment(enabled=enabled, soc=simulator.soc_and_source())
        return compile_guard.apply(decision, simulator.set_compile_mode, simulator.config)
    decision = compile_guard.from_environment(enabled=enabled)
    if not decision.apply:
        return decision
    import torch
    import torch_npu

    # torch.npu is torch_npu's, set by its import; torch's own types do not declare it.
    return compile_guard.apply(decision, torch_npu.npu.set_compile_mode, torch.npu.config)  # type: ignore[attr-defined]


class HookStatus(TypedDict):
    """What :func:`status` returns (``status --json`` and ``verify --json`` show it as ``hook``)."""

    hook_started: bool
    disabled: bool
    waiting_for: Optional[str]
    events: List[str]
    release: Optional[str]
    registered: List[str]
    native: List[str]
    drift: List[str]
    errors: List[str]
    compile_guard: Optional[Dict[str, Any]]


def status() -> HookStatus:
    """The in-process record of the startup hook and of what it registered.

    ``native`` lists the fixes left alone: their op has an NPU kernel, or its ``out=`` form has.
    """
    boot = files.running()
    state = boot.STATE if boot is not None else None
    if (
        state is not None
        and state.finder in sys.meta_path
        and boot is not None
        and boot.WATCHED in sys.modules
    ):
        from ascend_env.hook import watch  # imported past the hook, and no import since: notice it now

        watch.imported_past(state, boot.WATCHED)
    return {
        "hook_started": state is not None and state.started,
        "disabled": state is not None and state.disabled,
        "waiting_for": (
            boot.WATCHED if boot is not None and state is not None and state.finder in sys.meta_path else None
        ),
        "events": list(state.events) if state is not None else [],
        "release": RECORD.release,
        "registered": list(RECORD.registered),
        "native": list(RECORD.native),
        "drift": list(RECORD.drift),
        "errors": (list(state.errors) if state is not None else []) + list(RECORD.errors),
        "compile_guard": RECORD.compile_guard,
    }
