"""The smoke test's own process: ``python -m ascend_env.checks.smoke --report FILE [options]``.

``ascend_env.checks.verify`` starts it in a fresh process of the target interpreter, so the startup hook
runs exactly as in a user's process. It records what the parent judges and writes it as one JSON
document to ``--report`` (never to stdout, which user code may print to):

- ``silencers``: whatever in its own environment would still hide torch_npu's fallback line;
- ``installation``: the patch state (manifest hashes) and the startup hook's files;
- ``backend``: the real NPU (``torch_npu`` imports and ``npu:0`` answers), the real torch_npu on
  the emulated CANN (``--device emulated``; ``emulated_cann``: its counters at the end) or the simulator;
- ``imports``: how torch_npu was imported (``--imports``: through transformers' or accelerate's
  availability check, as real programs reach it, or directly), and by which module file;
- ``steps``: one per fix of the registry (:mod:`ascend_env.kernels.registry`), its ``smoke``
  samples (every overload, ``out=`` included) against the CPU; and ``generate`` (a
  config-built Llama, greedy with two eos ids, ``min_new_tokens`` and ``suppress_tokens``, against
  the CPU), each with the simulator's fallback counts;
- ``hook``: :func:`ascend_env.hook.runtime.status` once the backend is up; ``warnings``: Python warnings;
- ``compile``: after ``generate``, the compile mode it ran in (:func:`_compile_record`).

``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` (set by the parent) is dropped from the environment before the
backend starts when the release does not honour it. Where it is in force, the ``generate`` step runs
without it, so that a fallback outside isin is listed as a finding instead of aborting generation:
torch_npu reads it once per process, so on a real NPU that step is left to a second process
(``deferred``); the simulator reads it at each fallback, so there it is dropped in place. torch is
imported only inside the functions below.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ascend_env.checks.smoke_fixes import check_fix
from ascend_env.checks.smoke_report import (
    Backend,
    CompileRecord,
    Imports,
    Installation,
    SmokeReport,
    StepResult,
)
from ascend_env.kernels.registry import FIXES, by_name
from ascend_env.utils import atomic, progress

__all__ = [
    "DEVICES",
    "EMULATED",
    "FALLBACK_DISABLE",
    "GENERATE_OPTIONS",
    "IMPORTS",
    "PROMPT",
    "SILENCERS",
    "STEPS",
    "import_torch_npu",
    "installation",
    "main",
    "run",
    "silencers",
    "tiny_llama",
]

SILENCERS = ("RANK", "TORCH_NPU_DISABLED_WARNING", "TORCH_NPU_WARNING_DISABLE", "TORCH_CPP_LOG_LEVEL")
FALLBACK_DISABLE = "TORCH_NPU_FALLBACK_CPU_DISABLE"
#: A step per fix of the registry that has smoke samples, in registry order, then generate().
STEPS = (*(fix.name for fix in FIXES if fix.smoke), "generate")
#: ``emulated``: the installed torch_npu, the real binary, on the emulated CANN (``ascend_env.sim.emulated``).
DEVICES = ("auto", "npu", "sim", "emulated")
EMULATED = "emulated_cann"  # the backend's kind there
#: How the smoke test's process reaches torch_npu, as real programs do: transformers' availability
#: check (a ``find_spec`` probe, then the import), accelerate's (at ``import accelerate``), or a
#: plain ``import torch_npu``.
IMPORTS = ("transformers", "accelerate", "direct")

# The generate() step: a tiny config-built Llama and the options that make transformers call isin.
PROMPT = [[5, 6, 7, 8], [9, 10, 11, 12]]
GENERATE_OPTIONS: Dict[str, Any] = {
    "do_sample": False,
    "max_new_tokens": 8,
    "min_new_tokens": 4,
    "eos_token_id": [2, 17],
    "suppress_tokens": [3, 4, 5],
    "pad_token_id": 0,
}


def silencers(environ: Mapping[str, str]) -> Dict[str, str]:
    """The variables in ``environ`` that can hide torch_npu's fallback line: ``RANK`` unless empty
    or exactly ``0`` (as ``warnings_silenced()`` in ``sim/csrc/sim_backend.cpp`` reads it: `` 0``
    silences), the others whatever their value."""
    found = {}
    for name in SILENCERS:
        value = environ.get(name)
        if value is None or (name == "RANK" and value in ("", "0")):
            continue
        found[name] = value
    return found


def installation() -> Installation:
    """The patch state of this Python's transformers and the startup hook's files next to it."""
    from ascend_env.exceptions import AscendEnvError
    from ascend_env.hook import files
    from ascend_env.patching import engine

    try:
        site = engine.default_site_packages()
    except AscendEnvError as exc:
        return {"error": exc.problem, "fix": exc.fix}
    found: Installation = {"site_packages": str(site)}
    try:
        report = engine.status(site, search_sys_path=True)
        verdict = report.verdict
        found["patches"] = {
            "status": verdict.status,
            "code": report.code,
            "transformers": report.transformers,
            "detail": verdict.detail,
            "drift": verdict.drift or [],
            "run": verdict.run,
            "files": {item.path: item.status for item in report.files},
        }
    except AscendEnvError as exc:
        found["patches"] = {"status": "unknown", "error": exc.problem, "fix": exc.fix}
    found["hook_files"] = files.installed(site)
    found["hook_current"] = files.is_current(site)
    boot = files.running()  # imported at start-up by the hook's .pth line
    found["hook_started"] = bool(boot is not None and boot.STATE.started)
    found["hook_disabled"] = bool(boot is not None and boot.STATE.disabled)
    return found


def _torch_npu_release() -> Optional[str]:
    for name in ("torch_npu", "torch-npu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _honours_fallback_disable(release: Optional[str]) -> bool:
    """Whether ``release`` honours TORCH_NPU_FALLBACK_CPU_DISABLE; an unknown release may, so yes."""
    from ascend_env.exceptions import UsageError
    from ascend_env.sim import optables

    if release is None:
        return False
    try:
        return optables.has_fallback_disable(release)
    except UsageError:
        return True


def _keep_fallback_disable(honoured: bool) -> bool:
    """Drop TORCH_NPU_FALLBACK_CPU_DISABLE where it is not honoured; whether it is in force."""
    if not honoured:
        os.environ.pop(FALLBACK_DISABLE, None)
    return os.environ.get(FALLBACK_DISABLE) == "1"


def import_torch_npu(order: str) -> Imports:
    """Import torch_npu the way ``order`` (one of :data:`IMPORTS`) says; what was done."""
    import torch  # noqa: F401 - every order imports torch first, as programs do

    done: Imports = {"order": order}
    if order == "transformers":
        _require_transformers()
        import transformers.utils

        done["available"] = bool(transformers.utils.is_torch_npu_available())
    elif order == "accelerate":
        if importlib.util.find_spec("accelerate") is None:
            done["skipped"] = "accelerate is not installed"
        else:
            import accelerate  # noqa: F401 - its import checks for an NPU: a probe, then torch_npu

    import torch_npu

    done["module"] = getattr(torch_npu, "__file__", None)
    return done


def _start_npu(order: str) -> Backend:
    """Import torch and torch_npu (as ``order`` says) and ask ``npu:0`` to answer; raises when it
    cannot."""
    release = _torch_npu_release()
    in_force = _keep_fallback_disable(_honours_fallback_disable(release))
    imports = import_torch_npu(order)
    import torch
    import torch_npu

    # torch.npu is torch_npu's, set by its import; torch's own types do not declare it.
    if not torch.npu.is_available() or torch.npu.device_count() < 1:  # type: ignore[attr-defined]
        raise RuntimeError("torch_npu imported, but no NPU device answered (torch.npu.is_available())")
    torch.empty(1, device="npu:0")
    return {
        "kind": "npu",
        "release": getattr(torch_npu, "__version__", release),
        "name": str(torch.npu.get_device_name(0)),  # type: ignore[attr-defined]
        "fallback_disable": in_force,
        "imports": imports,
    }


def _start_emulated(order: str) -> Backend:
    """The emulated CANN under the installed torch_npu (before its import), then as :func:`_start_npu`."""
    from ascend_env.sim import emulated

    emulated.enable()
    backend = _start_npu(order)
    backend["kind"] = EMULATED
    backend["name"] = f"{backend.get('name')} (emulated CANN, host memory)"
    return backend


def _start_simulator(torch_npu: Optional[str], order: str) -> Backend:
    """Enable the simulated NPU with the table ``ascend_env.checks.tables.choose_table`` picks, then
    import its torch_npu as ``order`` says (so the startup hook hears of it as of a real one)."""
    from ascend_env.checks import tables
    from ascend_env.sim import optables, startup

    table = tables.choose_table(torch_npu)
    if startup.OPLISTS in table.env:
        honoured = table.env.get(startup.FALLBACK_DISABLE) == "1"
    else:
        honoured = optables.has_fallback_disable(table.env[startup.TORCH_NPU])
    in_force = _keep_fallback_disable(honoured)
    startup.enable(table.env)
    return {
        "kind": "simulator",
        "release": table.label,
        "name": "simulated NPU",
        "fallback_disable": in_force,
        "imports": import_torch_npu(order),
        "chosen": table.chosen,
    }


def tiny_llama() -> Any:
    """A randomly initialised two-layer Llama (hidden size 32, vocabulary 96), the same every call."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _check_generate(torch: Any, device: str) -> StepResult:
    """Greedy generate() on ``device`` against the CPU: ``{"ok", "error", "tokens"}``."""
    try:
        import transformers

        model = tiny_llama()
        ids = torch.tensor(PROMPT)
        with torch.no_grad():
            expected = model.generate(ids, attention_mask=torch.ones_like(ids), **GENERATE_OPTIONS)
            on_device = ids.to(device)
            got = model.to(device).generate(
                on_device, attention_mask=torch.ones_like(on_device), **GENERATE_OPTIONS
            )
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    error = None
    if got.device.type != torch.device(device).type:
        error = f"the tokens are on {got.device}, not {device}"
    elif not torch.equal(got.cpu(), expected):
        error = f"the tokens {got.cpu().tolist()} differ from the CPU's {expected.tolist()}"
    return {
        "ok": error is None,
        "error": error,
        "tokens": expected.tolist(),
        "transformers": transformers.__version__,
    }


def _start_paths(backend: Backend) -> Optional[str]:
    """On the simulator, start the dispatch-path model (``ascend_env.sim.dispatch_model``), so that the
    would-be online compiles of ``generate()`` are counted; why it cannot be, else None."""
    if backend["kind"] != "simulator":
        return None
    from ascend_env import sim
    from ascend_env.sim import oppaths

    table = sim.enabled_table()
    if oppaths.lookup(table) is None:
        return f"no op-path data for the simulated table {table}"
    from ascend_env.sim import dispatch_model

    dispatch_model.start()
    return None


def _compile_record(torch: Any, backend: Backend, unmodelled: Optional[str]) -> CompileRecord:
    """The compile mode as ``generate()`` ran: the SoC, JIT compile, the guard's record and, on the
    simulator, the would-be online compiles of its steady state (the steps from ``STEADY_FROM``)."""
    from ascend_env.detect import socs
    from ascend_env.hook import runtime

    guard = runtime.status().get("compile_guard")
    if backend["kind"] != "simulator":
        import torch_npu

        check = getattr(getattr(torch_npu, "npu", None), "is_jit_compile_false", None)
        name = str(torch.npu.get_device_name(0))
        return {
            "soc": socs.lookup(name) or name,
            "soc_known": socs.lookup(name) is not None,
            "jit_compile": None if check is None else not check(),
            "guard": guard,
        }
    from ascend_env.sim import compile_mode, dispatch_model

    record: CompileRecord = {
        "soc": compile_mode.soc(),
        "soc_known": True,
        "soc_assumed": compile_mode.soc_assumed(),
        "jit_compile": compile_mode.jit_compile(),
        "guard": guard,
    }
    found = dispatch_model.report()
    if found is None:
        record["unmodelled"] = unmodelled or "the dispatch-path model did not start"
        return record
    steady, by_op = dispatch_model.steady_compiles(found)
    record.update(
        {
            "steady_from": dispatch_model.STEADY_FROM,
            "steady_would_compile": steady,
            "steady_would_compile_by_op": by_op,
        }
    )
    return record


def _fallbacks(kind: str) -> Dict[str, int]:
    if kind != "simulator":
        return {}
    from ascend_env import sim

    return dict(sorted(sim.fallbacks().items()))


def _reset(kind: str) -> None:
    if kind == "simulator":
        from ascend_env import sim

        sim.reset()


def run(
    report: SmokeReport, device: str, torch_npu: Optional[str], steps: Sequence[str], order: str = IMPORTS[0]
) -> None:
    """Fill ``report``; see the module docstring for its keys. Without ``steps``, only the backend
    starts and the hook's record is taken (a process that checks one import order)."""
    report["silencers"] = silencers(os.environ)
    if steps:
        report["installation"] = installation()
    with progress.step(
        f"smoke test: starting the device ({device}: import torch, then torch_npu or "
        f"the simulated NPU, through {order})",
        verbose=True,
    ):
        backend = _start_backend(report, device, torch_npu, order, "generate" in steps)
    if backend is None:
        return
    report["imports"] = backend.pop("imports")
    report["backend"] = backend
    import torch

    from ascend_env.hook import runtime

    unmodelled = _start_paths(backend) if "generate" in steps else None
    for step in steps:
        if step == "generate" and os.environ.get(FALLBACK_DISABLE) == "1":
            if backend["kind"] != "simulator":  # torch_npu read the variable once, at start-up
                report["deferred"] = ["generate"]
                continue
            os.environ.pop(FALLBACK_DISABLE)  # the simulator reads it at each fallback
        report["steps"][step] = _run_step(torch, backend, step)
    report["hook"] = runtime.status()
    if "generate" in report["steps"]:
        report["compile"] = _compile_record(torch, backend, unmodelled)
    if backend["kind"] == EMULATED:
        from ascend_env.sim import emulated

        report["emulated_cann"] = emulated.report()


def _require_transformers(recorded: Optional[Installation] = None) -> None:
    """The generate() step and transformers' import order need transformers: where it is not
    installed, say so (and how to install it) before the backend starts; where ascend-env still
    records patches of a transformers uninstalled since (``recorded``, :func:`installation`'s),
    what status says to run too."""
    if importlib.util.find_spec("transformers") is not None:
        return
    import shlex

    from ascend_env import origin
    from ascend_env.exceptions import EnvironmentProblem

    extra = shlex.quote(f"{origin.source() or origin.PLACEHOLDER}[sim]")
    fix = (
        "install the transformers your programs run (pip install transformers; on a machine with only "
        f"Python, the sim extra brings 4.46.3: pip install {extra}), then verify again"
    )
    patches = (recorded or {}).get("patches") or {}
    if patches.get("status") == "transformers removed" and patches.get("run"):
        fix += f"; where it is gone for good: {patches['run']}"
    raise EnvironmentProblem(
        f"transformers is not installed for {sys.executable}: the smoke test reaches "
        "torch_npu through transformers' check and runs its generate().",
        fix,
    )


def _start_backend(
    report: SmokeReport, device: str, torch_npu: Optional[str], order: str, generate: bool = False
) -> Optional[Backend]:
    """The NPU or the simulator, as ``device`` asks; None (the reason in ``report``) when it
    cannot start. Where transformers is needed (the ``generate`` step, its import order) but not
    installed, :func:`_require_transformers` raises, before the backend starts."""
    from ascend_env.exceptions import AscendEnvError

    if device == "auto" and importlib.util.find_spec("torch_npu") is None:
        device, report["simulator_reason"] = "sim", "torch_npu is not installed"
    if device in ("auto", "npu", "emulated"):
        try:
            # transformers' import order requires transformers, after torch
            return _start_emulated(order) if device == "emulated" else _start_npu(order)
        except AscendEnvError:
            raise
        except Exception as exc:  # an ImportError, a missing libhccl.so, no device: all say "no"
            report["device_error"] = f"{type(exc).__name__}: {exc}".strip()
            return None
    try:
        import torch  # noqa: F401 - a broken torch fails here, before the simulator
    except Exception as exc:
        report["torch_error"] = f"{type(exc).__name__}: {exc}".strip()
        return None
    if generate:
        _require_transformers(report.get("installation"))
    return _start_simulator(torch_npu, order)


def _run_step(torch: Any, backend: Backend, step: str) -> StepResult:
    """One step on ``npu:0``, with the fallbacks it caused and its time."""
    _reset(backend["kind"])
    started = time.monotonic()
    in_force = backend["fallback_disable"] and os.environ.get(FALLBACK_DISABLE) == "1"
    fixes = by_name()
    if step not in STEPS:
        raise ValueError(f"unknown smoke step {step!r}: the steps are {', '.join(STEPS)}")
    with progress.step(f"smoke test step {step} on npu:0 ({backend['kind']})", verbose=True):
        result = (
            _check_generate(torch, "npu:0") if step == "generate" else check_fix(torch, fixes[step], "npu:0")
        )
    result["fallback_disable"] = in_force
    result["fallbacks"] = _fallbacks(backend["kind"])
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ascend_env.checks.smoke", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--report", required=True, help="where to write the JSON report")
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--torch-npu", metavar="VERSION", help="the simulated torch_npu release")
    parser.add_argument("--steps", default=",".join(STEPS), help="comma-separated: " + ", ".join(STEPS))
    parser.add_argument(
        "--imports",
        choices=IMPORTS,
        default=IMPORTS[0],
        help="how to reach torch_npu: transformers' or accelerate's check, or directly",
    )
    args = parser.parse_args(argv)
    unknown = [step for step in args.steps.split(",") if step and step not in STEPS]
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}: the steps are {', '.join(STEPS)}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the smoke test and write its report; 0 once the report is written, whatever it says."""
    args = _parse(argv)
    steps = [step for step in args.steps.split(",") if step]
    report: SmokeReport = {"pid": os.getpid(), "python": sys.executable, "steps": {}}
    caught: List[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(report, args.device, args.torch_npu, steps, args.imports)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails with it
        from ascend_env.exceptions import AscendEnvError

        report["error"] = {
            "type": type(exc).__name__,
            "problem": getattr(exc, "problem", str(exc)),
            "fix": getattr(exc, "fix", None),
            "environment": isinstance(exc, AscendEnvError),
        }
    report["warnings"] = [
        {"category": w.category.__name__, "message": str(w.message), "where": f"{w.filename}:{w.lineno}"}
        for w in caught
    ]
    with atomic.replacing(Path(args.report)) as partial:
        partial.write_text(json.dumps(report, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
