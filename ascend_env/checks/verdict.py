"""The verdict of ``verify`` on the smoke test's runs: each check, the fallbacks and their evidence.

:func:`judge` reads the reports of the smoke test's processes
(:class:`ascend_env.checks.smoke_report.SmokeReport`) and their fd 2, and returns a
:class:`VerifyResult`, whose :meth:`~VerifyResult.to_dict` is ``verify --json``'s document. It
runs nothing and imports no torch.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ascend_env import states
from ascend_env.checks.smoke import EMULATED, FALLBACK_DISABLE, SILENCERS, STEPS
from ascend_env.checks.smoke_report import (
    Backend,
    CompileRecord,
    Installation,
    SmokeReport,
    StepResult,
)
from ascend_env.checks.verify_result import Check, Fallback, Smoke, VerifyResult

if TYPE_CHECKING:
    from ascend_env.hook.runtime import HookStatus

__all__ = [
    "IMPORT_WORDS",
    "LOW_PERFORMANCE_64BIT",
    "fallback_lines",
    "import_paths",
    "judge",
    "refused_ops",
]

_LINE = re.compile(
    r"CAUTION: The operator '([^']+)' is not currently supported on the NPU backend and will fall back"
)
_REFUSED = re.compile(r"operator '([^']+)'[^\n]*" + FALLBACK_DISABLE)


def fallback_lines(text: str) -> List[str]:
    """The ops named by torch_npu's CAUTION lines in ``text``, in order, once each."""
    return list(dict.fromkeys(_LINE.findall(text)))


def refused_ops(text: str) -> List[str]:
    """The ops named by errors that ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` raised, once each."""
    return list(dict.fromkeys(_REFUSED.findall(text)))


def _family(op: str) -> Optional[str]:
    """The fix (a registry name) whose overload ``op`` is (``aten::isin.Tensor_Tensor_out``:
    ``isin``), or None for an op no fix registers."""
    from ascend_env.kernels.registry import OVERLOADS

    return next((fixed.family for fixed in OVERLOADS if fixed.qualified_name == op), None)


def _fixed_families() -> Tuple[str, ...]:
    from ascend_env.kernels.registry import FIXES

    return tuple(fix.name for fix in FIXES)


_FIX_INSTALL = (
    "python -m ascend_env install (the startup hook; the patches too where torch_npu has no NPU isin), "
    "then verify again"
)
_FIX_HOOK = "python -m ascend_env install (or --hook-only), then verify again"
_FIX_REPORT = "report it, with the output of: python -m ascend_env verify --json"


def _collect_fallbacks(runs: Sequence[Smoke]) -> Dict[str, Fallback]:
    """Every op that fell back in any run, by op name (sorted), with the evidence for it."""
    found: Dict[str, Fallback] = {}
    for smoke in runs:
        warned = "\n".join(w.get("message", "") for w in smoke.report.get("warnings", []))
        for op in fallback_lines(smoke.stderr + "\n" + warned):
            found.setdefault(op, Fallback()).line = True
        for step, result in smoke.report.get("steps", {}).items():
            _collect_step(found, step, result)
    return dict(sorted(found.items()))


def _collect_step(found: Dict[str, Fallback], step: str, result: StepResult) -> None:
    """Add the refusals and the simulator's counts that one step's result records."""
    errors = [o.get("error") or "" for o in result.get("overloads", {}).values()]
    errors.append(result.get("error") or "")
    for op in refused_ops("\n".join(errors)):
        item = found.setdefault(op, Fallback())
        item.refused = True
        item.seen_in(step)
    for op, count in result.get("fallbacks", {}).items():
        item = found.setdefault(op, Fallback())
        item.count = (item.count or 0) + int(count)
        item.seen_in(step)


def _silenced_lines(runs: Sequence[Smoke]) -> List[str]:
    """Ops the simulator counted in a run whose fd 2 shows no CAUTION line for them."""
    missing = []
    for smoke in runs:
        steps = smoke.report.get("steps", {}).values()  # a refused fallback prints no line
        counted = {
            op for result in steps if not result.get("fallback_disable") for op in result.get("fallbacks", {})
        }
        seen = set(fallback_lines(smoke.stderr))
        missing.extend(sorted(counted - seen))
    return list(dict.fromkeys(missing))


def _environment_check(runs: Sequence[Smoke]) -> Check:
    left = {name: value for smoke in runs for name, value in smoke.report.get("silencers", {}).items()}
    silenced = _silenced_lines(runs)
    if left:
        names = ", ".join(f"{name}={value}" for name, value in sorted(left.items()))
        return Check.failed(
            "fallback line",
            f"{names} was still set inside the smoke test's process, so torch_npu's fallback line could "
            "be hidden",
            "find what sets it when that Python starts (a wrapper script, sitecustomize, a .pth file) and "
            "stop it there",
        )
    if silenced:
        return Check.failed(
            "fallback line",
            f"the simulator counted fallbacks of {', '.join(silenced)} but no CAUTION line reached fd 2",
            "find what silences torch_npu's warnings in that Python (its start-up, or the C++ log level)",
        )
    unset = ", ".join(SILENCERS[1:])
    return Check.passed("fallback line", f"nothing silences it (RANK=0; {unset} unset in the smoke test)")


def _process_checks(smoke: Smoke) -> List[Check]:
    """What went wrong in one smoke test process itself: no report, a crash, torch, the device."""
    checks = []
    if not smoke.report:
        tail = "\n".join(smoke.stderr.strip().splitlines()[-5:]) or "no output"
        checks.append(
            Check.failed(
                "smoke test",
                f"the smoke test process exited {smoke.returncode} without a report: {tail}",
                "run it by hand: python -m ascend_env.checks.smoke --report /tmp/report.json",
            )
        )
    elif "error" in smoke.report:
        error = smoke.report["error"]
        if error.get("environment") and error.get("fix"):  # raised on purpose: its problem and fix
            checks.append(Check.failed("smoke test", str(error["problem"]), str(error["fix"])))
        else:
            checks.append(Check.failed("smoke test", f"{error['type']}: {error['problem']}", _FIX_REPORT))
    if "torch_error" in smoke.report:
        checks.append(_torch_check(smoke.report["torch_error"]))
    if "device_error" in smoke.report:
        checks.append(_device_check(smoke.report))
    return checks


def _device_check(report: SmokeReport) -> Check:
    """The failed check of a torch_npu that did not start; on a machine with an NPU, with the cause."""
    error = str(report["device_error"])
    evidence = report.get("npu_machine")
    if evidence is None:
        return Check.failed(
            "device",
            f"npu:0 did not start: {error}",
            "check the NPU with npu-smi info, or run verify --device sim",
        )
    detail = f"this machine has an NPU ({evidence}), but torch_npu did not start: {error}"
    if re.match(r"ModuleNotFoundError: No module named '?torch(_npu)?'?$", error):  # no torch: no torch_npu
        return Check.failed(
            "device",
            f"this machine has an NPU ({evidence}), but torch_npu is not installed in this Python, "
            "so its NPU was not verified (the simulator would pass in the wrong environment)",
            "install torch_npu here (the release for this machine's CANN and torch), or pass "
            "--device sim to verify on the simulator on purpose",
        )
    if ".so" in error or "libhccl" in error or "libascend" in error:
        return Check.failed(
            "device",
            detail + " (CANN's libraries are not on the library path)",
            str(report.get("cann") or "source CANN's set_env.sh, then verify again"),
        )
    return Check.failed(
        "device",
        detail,
        "check the NPU with npu-smi info and torch_npu with: python -c 'import torch_npu'; "
        "verify --device sim checks the rest on the simulator",
    )


def _torch_check(error: str) -> Check:
    """The failed check for a torch that does not import: never installed, or broken."""
    if re.match(r"ModuleNotFoundError: No module named '?torch'?$", error):
        from ascend_env import origin

        extra = shlex.quote(f"{origin.source() or origin.PLACEHOLDER}[sim]")
        return Check.failed(
            "torch",
            "torch is not installed in that Python, so the simulated NPU cannot start",
            f"install the torch your torch_npu pins; on a machine with only Python, the sim extra: "
            f"pip install {extra}; then verify again",
        )
    return Check.failed(
        "torch",
        f"import torch failed: {error}",
        "reinstall torch in that Python, then check: python -c 'import torch'",
    )


def _step_check(name: str, runs: Sequence[Smoke]) -> Optional[Check]:
    """Whether step ``name`` gave the CPU's results on the NPU (None when it did not run)."""
    ran = [smoke for smoke in runs if name in smoke.report.get("steps", {})]
    if not ran:
        return None
    result = ran[-1].report["steps"][name]
    if result.get("skipped"):  # its op's module does not import here, or nothing answers for the CPU
        return Check.passed(name, f"not tried: {result['skipped']}")
    if "overloads" in result:  # a step per op of the registry of fixes
        wrong = [f"{op}: {r['error']}" for op, r in result["overloads"].items() if not r["ok"]]
        if wrong:
            return Check.failed(name, "; ".join(wrong), _FIX_INSTALL)
        return Check.passed(
            name, f"all {len(result['overloads'])} overloads (out= included) ran on npu:0 and match the CPU"
        )
    if not result.get("ok"):
        return Check.failed(name, result.get("error") or "generate() failed", _FIX_INSTALL)
    return Check.passed(
        name,
        "tiny Llama, greedy with 2 eos ids, min_new_tokens and suppress_tokens: "
        "the same tokens on npu:0 as on the CPU",
    )


def _fix_fallback_check(family: str, fallbacks: Mapping[str, Fallback]) -> Check:
    """Fails when any overload of ``family`` (an op ascend-env fixes) fell back, by any evidence:
    fd-2 line, refusal or count."""
    name = f"{family} fallback"
    found = {op: item for op, item in fallbacks.items() if _family(op) == family}
    if not found:
        return Check.passed(name, "none: no CAUTION line, no refusal, nothing counted")
    parts = []
    for op, item in found.items():
        steps = f" in {', '.join(item.steps)}" if item.steps else ""
        parts.append(f"{op} fell back to the CPU{steps} ({_evidence(item)})")
    return Check.failed(name, "; ".join(parts), _FIX_INSTALL)


def _evidence(item: Fallback) -> str:
    evidence = [
        what
        for what, seen in (
            ("CAUTION line on fd 2", item.line),
            ("refused by " + FALLBACK_DISABLE, item.refused),
        )
        if seen
    ]
    if item.count:
        evidence.append(f"counted {item.count} times by the simulator")
    return "; ".join(evidence)


def _patches_check(installation: Installation) -> Check:
    if "error" in installation:
        return Check.failed("patches", installation["error"], installation.get("fix"))
    patches = installation.get("patches", {})
    status = patches.get("status")
    files = patches.get("files") or {}
    if status == "applied" and files and all(kind == "clean" for kind in files.values()):
        status = "not applied"  # state recorded by an install --hook-only, every target file unpatched
    where = (
        f"transformers {patches.get('transformers') or '(not installed)'} in "
        f"{installation.get('site_packages')}"
    )
    if status in states.BROKEN:  # status exits 1 and asks the user to act: so does verify
        detail = f"{status}: {where}" + "".join(f"; {line}" for line in patches.get("drift", []))
        command = "install (re-applies)" if status == "drifted" else "status"
        return Check.failed(
            "patches", detail, f"python -m ascend_env {command}; {patches.get('run') or 'then verify again'}"
        )
    if status == "unknown":
        return Check.passed("patches", f"not checked: {patches.get('error')}")
    detail = f"{status}: {where}" + (f" ({patches['detail']})" if patches.get("detail") else "")
    if status == "not applied":
        detail += "; optional where the startup hook registers isin"
    return Check.passed("patches", detail)


def _hook_check(runs: Sequence[Smoke], installation: Installation) -> Check:
    failed = _hook_install_check(installation)
    if failed is not None:
        return failed
    heard = [smoke for smoke in runs if "hook" in smoke.report]
    if not heard:
        if any("error" in smoke.report for smoke in runs):
            why = "the smoke test stopped before it took the hook's record"
        else:
            why = "the NPU backend did not start"
        return Check.failed("hook", f"not checked: {why}", "see the checks above")
    registered: List[str] = []
    paths: List[str] = []
    untried: List[str] = []
    for smoke in heard:
        record = smoke.report["hook"]
        failed = _hook_record_check(record, _import_path(smoke))
        if failed is not None:
            return failed
        registered = registered or list(record["registered"])
        skipped = smoke.report.get("imports", {}).get("skipped")
        words = IMPORT_WORDS.get(smoke.imports, smoke.imports)
        (untried if skipped else paths).append(f"{words} ({skipped})" if skipped else words)
    detail = f"heard of torch_npu through {', '.join(paths)}"
    if untried:
        detail += f" (not tried: {', '.join(untried)})"
    return Check.passed(
        "hook", f"{detail}; registered " + (", ".join(registered) or "nothing (every fixed op is native)")
    )


IMPORT_WORDS = {
    "transformers": "transformers' check",
    "accelerate": "import accelerate",
    "direct": "a plain import",
}


def _import_path(smoke: Smoke) -> str:
    """How the smoke test's process reached torch_npu, in words."""
    return f"reached through {IMPORT_WORDS.get(smoke.imports, smoke.imports)}"


def import_paths(runs: Sequence[Smoke]) -> List[Dict[str, Any]]:
    """How each smoke test process reached torch_npu and what the hook heard (``--json``)."""
    return [
        {
            "imports": smoke.imports,
            "skipped": smoke.report.get("imports", {}).get("skipped"),
            "events": list(smoke.report["hook"].get("events", [])),
        }
        for smoke in runs
        if "hook" in smoke.report
    ]


def _hook_install_check(installation: Installation) -> Optional[Check]:
    """The failed check when the hook is missing, off, stale or did not start; else None."""
    site = installation.get("site_packages", "site-packages")
    known = "error" not in installation  # without the installation's state, the files are not judged
    if known and not installation.get("hook_files"):
        return Check.failed("hook", f"the startup hook is not installed in {site}", _FIX_HOOK)
    if installation.get("hook_disabled"):
        return Check.failed(
            "hook",
            "the startup hook is turned off by ASCEND_ENV_DISABLE",
            "unset ASCEND_ENV_DISABLE (or set it to 0)",
        )
    if known and not installation.get("hook_current"):
        return Check.failed(
            "hook", f"the startup hook's files in {site} differ from this ascend-env's", _FIX_HOOK
        )
    if known and not installation.get("hook_started"):
        return Check.failed(
            "hook",
            f"the startup hook's files are in {site}, but it did not run at start-up",
            f"check that {site} is a site directory of that Python (python -m site)",
        )
    return None


def _hook_record_check(record: HookStatus, path: str) -> Optional[Check]:
    """The failed check when one process's hook record (torch_npu reached ``path``) shows errors,
    no sign of torch_npu or missing kernels; else None."""
    from ascend_env.kernels.registry import OVERLOADS

    if record.get("errors"):
        return Check.failed("hook", "the startup hook failed: " + "; ".join(record["errors"]), _FIX_REPORT)
    if not record.get("events"):
        return Check.failed(
            "hook",
            f"the startup hook ran, but did not hear of torch_npu {path}: no NPU isin and no "
            "compile-mode guard in programs that reach torch_npu so",
            _FIX_HOOK + "; if it persists, " + _FIX_REPORT,
        )
    covered = {*record["registered"], *record["native"]}
    # A fix whose op another import defines (torchvision) is decided once that import happens.
    missing = [fix.op for fix in OVERLOADS if fix.fix.requires is None and fix.op not in covered]
    if missing:
        return Check.failed(
            "hook", f"{', '.join(missing)}: neither native nor registered by the hook", _FIX_HOOK
        )
    return None


LOW_PERFORMANCE_64BIT = "Low Performance OP with 64-bit"


def _guard_fix(record: CompileRecord) -> str:
    """What to do about JIT compile being on, from what the compile-mode guard recorded."""
    guard = record.get("guard") or {}
    reason = str(guard.get("reason") or "")
    soc = record.get("soc")
    if guard.get("applied"):
        return (
            "the guard turned JIT compile off and the code turned it back on: drop that "
            "torch_npu.npu.set_compile_mode(jit_compile=True) call"
        )
    if "no binary kernels" in reason and soc:
        from ascend_env.detect import socs

        family = socs.family(soc).lower() if socs.lookup(soc) else "<soc>"
        return (
            f"install the binary kernels (Ascend-cann-kernels-{family}); the startup hook then turns "
            "JIT compile off"
        )
    if reason.startswith("turned off"):
        return (
            "run python -m ascend_env install without --no-compile-guard, with ASCEND_ENV_COMPILE_GUARD unset"
        )
    return (
        "run: python -m ascend_env install (its startup hook turns JIT compile off where the binary "
        "kernels are installed)"
    )


def _compile_check(runs: Sequence[Smoke]) -> Optional[Check]:
    """No online compilation during ``generate()``: on a device, JIT compile off and no 64-bit
    line; on the simulator, no would-be online compile in the steady state of its generation."""
    record = next((s.report["compile"] for s in runs if "compile" in s.report), None)
    if record is None:
        return None
    if "steady_would_compile" in record:
        return _simulated_compile_check(record)
    if "unmodelled" in record:
        said = "on" if record.get("jit_compile") else "off"
        return Check.passed(
            "compile mode",
            f"not modelled ({record['unmodelled']}); JIT compile {said} on simulated {record.get('soc')}",
        )
    lines = [line for s in runs for line in s.stderr.splitlines() if LOW_PERFORMANCE_64BIT in line]
    return _device_compile_check(record, lines)


def _simulated_compile_check(record: CompileRecord) -> Check:
    """The simulator's model: would-be online compiles in the steady state of ``generate()``."""
    soc = record.get("soc")
    said = "on" if record.get("jit_compile") else "off"
    where = f"simulated {soc}" + (
        " (assumed: pass --soc, or set ASCEND_ENV_SOC, to model another)" if record.get("soc_assumed") else ""
    )
    count = int(record["steady_would_compile"])
    if count == 0:
        return Check.passed(
            "compile mode",
            f"no online compiles in the steady state of generate() on "
            f"{where} (JIT compile {said}; modelled, not measured)",
        )
    ops = ", ".join(list(record.get("steady_would_compile_by_op", {}))[:4])
    return Check.failed(
        "compile mode",
        f"{count} would-be online compiles in the steady state of generate() on {where} "
        f"(JIT compile on: each new shape compiles before it runs; {ops})",
        _guard_fix(record),
    )


def _device_compile_check(record: CompileRecord, lines: Sequence[str]) -> Check:
    """A real device: JIT compile off, and no 64-bit line (``lines``) from torch_npu."""
    soc = record.get("soc")
    jit = record.get("jit_compile")
    if jit is None:
        return Check.passed("compile mode", f"not checked: torch_npu has no is_jit_compile_false() ({soc})")
    if jit or lines:
        detail = f"JIT compile is on on {soc}: generate() compiles ops online" if jit else ""
        if lines:
            detail = (detail + "; " if detail else "") + f"torch_npu printed {lines[0].strip()}"
        return Check.failed("compile mode", detail, _guard_fix(record))
    return Check.passed("compile mode", f"JIT compile off on {soc}: prebuilt op_api kernels, no compiles")


def judge(
    runs: Sequence[Smoke], strict: bool = False, simulator_reason: Optional[str] = None
) -> VerifyResult:
    """The verdict on the smoke test's runs.

    It fails on any isin fallback, a wrong result, a silenced fallback line, drifted patches, a hook
    that did not run, a broken torch import or a backend that did not start; with ``strict``, on any
    fallback at all. Other fallbacks are findings.
    """
    first = runs[0].report
    backend = next((s.report["backend"] for s in runs if "backend" in s.report), Backend())
    on_npu = backend.get("kind") == "npu" or "npu_machine" in first
    on_emulated = backend.get("kind") == EMULATED
    fallbacks = _collect_fallbacks(runs)
    others = {op: item for op, item in fallbacks.items() if _family(op) is None}
    checks = _checks(runs, fallbacks)
    not_proven = _unimplemented(runs) if on_emulated else []
    if on_emulated:
        checks.append(_emulated_check(not_proven))
    if strict and others:
        checks.append(
            Check.failed(
                "strict",
                f"{len(others)} op(s) besides those ascend-env fixes fell back: {', '.join(others)}",
                "use a torch_npu release with NPU kernels for them, or drop --strict",
            )
        )
    return VerifyResult(
        ok=bool(checks) and all(check.ok for check in checks),
        device="npu" if on_npu else ("emulated_cann" if on_emulated else "simulator"),
        device_name=backend.get("name"),
        release=backend.get("release"),
        simulator_reason=None if on_npu else simulator_reason,
        not_proven=[f"the emulated CANN does not implement {name}" for name in not_proven],
        strict=strict,
        fallback_disable=bool(first.get("backend", {}).get("fallback_disable")),
        processes=len(runs),
        checks=checks,
        fallbacks=fallbacks,
        findings=[_finding(op, item) for op, item in others.items()],
        installation=first.get("installation", {}),
        hook=next((s.report["hook"] for s in runs if "hook" in s.report), None),
        warnings=[w for smoke in runs for w in smoke.report.get("warnings", [])],
        import_paths=import_paths(runs),
    )


def _unimplemented(runs: Sequence[Smoke]) -> List[str]:
    """The entry points the emulated CANN lacks that the binary called, by its counters or its
    line on fd 2."""
    from ascend_env.sim import emulated

    found: List[str] = []
    for smoke in runs:
        for name in emulated.unimplemented(
            smoke.report.get("emulated_cann") or {}
        ) + emulated.unimplemented_in(smoke.stderr):
            if name not in found:
                found.append(name)
    return found


def _emulated_check(missing: Sequence[str]) -> Check:
    """The real binary on the emulated CANN proves something only where no entry point it called
    was missing (an unimplemented one fails and says so; what followed is not the binary's)."""
    if not missing:
        return Check.passed(
            "emulated CANN",
            "every CANN entry point the binary called is implemented (host memory, ATen kernels)",
        )
    return Check.failed(
        "emulated CANN",
        f"not proven: the binary called {', '.join(missing)}, which the emulated CANN does not implement",
        "report the entry points to ascend-env; until then verify on the simulator (verify --device sim)",
    )


def _checks(runs: Sequence[Smoke], fallbacks: Mapping[str, Fallback]) -> List[Check]:
    """Every check but ``strict``, in the report's order."""
    first = runs[0].report
    checks = [_environment_check(runs)] if first else []
    checks += [check for smoke in runs for check in _process_checks(smoke)]
    checks += [check for check in (_step_check(step, runs) for step in STEPS) if check is not None]
    if any(smoke.report.get("steps") for smoke in runs):
        checks += [_fix_fallback_check(family, fallbacks) for family in _fixed_families()]
    installation = first.get("installation", {})
    if installation:
        checks += [_patches_check(installation), _hook_check(runs, installation)]
    compiled = _compile_check(runs)
    if compiled is not None:
        checks.append(compiled)
    return checks


def _finding(op: str, item: Fallback) -> str:
    times = f", {item.count} times" if item.count else ""
    return f"{op} fell back to the CPU ({', '.join(item.steps) or 'smoke test'}{times})"
