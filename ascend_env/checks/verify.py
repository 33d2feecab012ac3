"""``verify``: run the smoke test (:mod:`ascend_env.checks.smoke`) in a fresh process and judge it.

This side never imports torch. It builds the child's environment (:func:`child_environment`:
everything that silences torch_npu's fallback line is neutralised), runs the target interpreter,
captures its fd 2 (the CAUTION line is printed there by C++, never as a Python warning) and reads
the child's JSON report, which also lists the Python warnings.

``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` is set for the isin step where the release honours it (the
child drops it otherwise): there it turns an isin fallback into an error that names the op, and it
cannot mask anything else, since the isin checks and the hook's kernels run only ops that every
release runs natively. The ``generate()`` step runs without it, so that a fallback outside isin is
listed as a finding (a failure with ``--strict``) instead of aborting generation: torch_npu reads
the variable once per process, so on a real NPU that step runs in a second process (the simulator
reads it at each fallback, so the child drops it in place).

Which device: the real ``npu:0`` when torch_npu imports and a device answers; otherwise, or with
``--simulate`` or ``--torch-npu``, the simulator. When torch_npu is installed but does not start (no
CANN, no device: a Docker build step), the smoke test runs again on the simulator, with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` so that torch_npu cannot break ``import torch``, and the report
says why. On the simulator the fd-2 line is cross-checked against the simulator's own counts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ascend_env.checks.smoke import FALLBACK_DISABLE, SILENCERS, STEPS
from ascend_env.exceptions import CheckFailed, EnvironmentProblem, UsageError
from ascend_env.utils.pyflags import child_flags

AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"
AUDIT_VARIABLES = (
    "ASCEND_ENV_AUDIT_TORCH_NPU", "ASCEND_ENV_AUDIT_OPLISTS", "ASCEND_ENV_AUDIT_LABEL",
    "ASCEND_ENV_AUDIT_FALLBACK_DISABLE", "ASCEND_ENV_AUDIT_REPORTS",
)
TIMEOUT = 900.0  # seconds; the first run on the simulator may compile its extension
# Patch states that mean generation may fall back again (``install.status``'s words).
BROKEN_PATCH_STATES = ("drifted", "interrupted", "partly applied", "conflict")

_LINE = re.compile(
    r"CAUTION: The operator '([^']+)' is not currently supported on the NPU backend and will fall back"
)
_REFUSED = re.compile(r"operator '([^']+)'[^\n]*" + FALLBACK_DISABLE)


def child_environment(
    base: Mapping[str, str], *, simulate: bool, fallback_disable: bool
) -> Dict[str, str]:
    """``base`` with nothing left that hides torch_npu's fallback line.

    ``RANK=0``; ``TORCH_NPU_DISABLED_WARNING``, ``TORCH_NPU_WARNING_DISABLE`` and
    ``TORCH_CPP_LOG_LEVEL`` unset; ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` when ``fallback_disable``,
    else unset; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` when ``simulate``; audit settings dropped.
    """
    dropped = {*SILENCERS, *AUDIT_VARIABLES, FALLBACK_DISABLE}
    env = {name: value for name, value in base.items() if name not in dropped}
    env["RANK"] = "0"
    if fallback_disable:
        env[FALLBACK_DISABLE] = "1"
    if simulate:
        env[AUTOLOAD] = "0"
    return env


def fallback_lines(text: str) -> List[str]:
    """The ops named by torch_npu's CAUTION lines in ``text``, in order, once each."""
    return list(dict.fromkeys(_LINE.findall(text)))


def refused_ops(text: str) -> List[str]:
    """The ops named by errors that ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` raised, once each."""
    return list(dict.fromkeys(_REFUSED.findall(text)))


def is_isin(op: str) -> bool:
    return op.split("::")[-1].split(".")[0] == "isin"


@dataclass
class Smoke:
    """One smoke test process: what it was asked, its report, and its fd 2."""

    device: str
    steps: Sequence[str]
    report: Dict[str, Any] = field(default_factory=dict)
    stderr: str = ""
    returncode: int = 0
    seconds: float = 0.0


@dataclass
class Options:
    """What ``verify`` was asked to do."""

    python: str = sys.executable
    simulate: bool = False
    torch_npu: Optional[str] = None
    strict: bool = False
    timeout: float = TIMEOUT


def run_smoke(
    options: Options, device: str, steps: Sequence[str], env: Mapping[str, str]
) -> Smoke:
    """Run ``python -m ascend_env.checks.smoke`` once and collect its report and fd 2."""
    smoke = Smoke(device=device, steps=list(steps))
    with tempfile.TemporaryDirectory(prefix="ascend-env-verify-") as scratch:
        report = Path(scratch, "report.json")
        command = [options.python, *child_flags(options.python), "-m", "ascend_env.checks.smoke",
                   "--report", str(report), "--device", device, "--steps", ",".join(steps)]
        if options.torch_npu:
            command += ["--torch-npu", options.torch_npu]
        started = time.monotonic()
        try:
            done = subprocess.run(command, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=options.timeout)
        except subprocess.TimeoutExpired:
            raise CheckFailed(
                f"the smoke test did not finish within {options.timeout:.0f} s in {options.python}.",
                "run it by hand to see where it hangs: "
                "python -m ascend_env.checks.smoke --report /tmp/r.json",
            ) from None
        except OSError as exc:
            raise UsageError(f"cannot run {options.python}: {exc.strerror or exc}.",
                             "pass --python the path of a Python interpreter") from None
        smoke.seconds = time.monotonic() - started
        smoke.returncode = done.returncode
        smoke.stderr = done.stderr.decode("utf-8", "replace")
        if report.is_file():
            smoke.report = json.loads(report.read_text(encoding="utf-8"))
    if not smoke.report and "No module named" in smoke.stderr and "ascend_env" in smoke.stderr:
        raise EnvironmentProblem(
            f"{options.python} cannot import ascend_env, so the smoke test cannot run there.",
            f"install ascend-env into it: {options.python} -m pip install ascend-env",
        )
    error = smoke.report.get("error")
    if error and error.get("environment"):
        raise EnvironmentProblem(error["problem"], error.get("fix"))
    return smoke


def verify(options: Options, environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Run the smoke test as ``options`` say and return the judged result (see :func:`judge`)."""
    from ascend_env.sim import optables

    environ = os.environ if environ is None else environ
    python = shutil.which(options.python) or options.python
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise UsageError(f"--python {options.python}: not an executable file.",
                         "pass the path of a Python interpreter, e.g. /opt/venv/bin/python")
    # An unknown release raises UsageError here, before any process starts.
    release = optables.canonical(options.torch_npu) if options.torch_npu else None
    options = dataclasses.replace(options, python=python, torch_npu=release)
    reason = None
    if options.simulate or options.torch_npu:
        reason = "--torch-npu was given" if options.torch_npu else "--simulate was given"
    device = "sim" if reason else "auto"
    started = time.monotonic()
    first = run_smoke(options, device, STEPS,
                      child_environment(environ, simulate=device == "sim", fallback_disable=True))
    if device == "auto" and "device_error" in first.report:
        why = (first.report["device_error"].strip().splitlines() or ["no reason given"])[0]
        reason = f"torch_npu is installed but did not start ({why})"
        device = "sim"
        first = run_smoke(options, device, STEPS,
                          child_environment(environ, simulate=True, fallback_disable=True))
    reason = reason or first.report.get("simulator_reason")
    runs = [first]
    if "generate" in first.report.get("deferred", []):
        device = "npu" if first.report.get("backend", {}).get("kind") == "npu" else "sim"
        runs.append(run_smoke(options, device, ["generate"],
                              child_environment(environ, simulate=device == "sim", fallback_disable=False)))
    result = judge(runs, strict=options.strict, simulator_reason=reason)
    result["python"] = options.python
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


# -- judging -------------------------------------------------------------------------------------


def _check(name: str, ok: bool, detail: str, fix: Optional[str] = None) -> Dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail, "fix": None if ok else fix}


def collect_fallbacks(runs: Sequence[Smoke]) -> Dict[str, Dict[str, Any]]:
    """Every op that fell back in any run: ``{op: {"line", "refused", "count", "steps"}}``.

    ``line``: torch_npu's CAUTION line reached fd 2 (or a Python warning); ``refused``: an error
    from ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` named it; ``count``: the simulator's count (None on
    a real device).
    """
    found: Dict[str, Dict[str, Any]] = {}

    def entry(op: str) -> Dict[str, Any]:
        return found.setdefault(op, {"line": False, "refused": False, "count": None, "steps": []})

    for smoke in runs:
        warned = "\n".join(w.get("message", "") for w in smoke.report.get("warnings", []))
        for op in fallback_lines(smoke.stderr + "\n" + warned):
            entry(op)["line"] = True
        for step, result in smoke.report.get("steps", {}).items():
            errors = [o.get("error") or "" for o in result.get("overloads", {}).values()]
            errors.append(result.get("error") or "")
            for op in refused_ops("\n".join(errors)):
                item = entry(op)
                item["refused"] = True
                item["steps"] = sorted({*item["steps"], step})
            for op, count in result.get("fallbacks", {}).items():
                item = entry(op)
                item["count"] = (item["count"] or 0) + int(count)
                item["steps"] = sorted({*item["steps"], step})
    return dict(sorted(found.items()))


def _silenced_lines(runs: Sequence[Smoke]) -> List[str]:
    """Ops the simulator counted in a run whose fd 2 shows no CAUTION line for them."""
    missing = []
    for smoke in runs:
        steps = smoke.report.get("steps", {}).values()  # a refused fallback prints no line
        counted = {op for result in steps if not result.get("fallback_disable")
                   for op in result.get("fallbacks", {})}
        seen = set(fallback_lines(smoke.stderr))
        missing.extend(sorted(counted - seen))
    return list(dict.fromkeys(missing))


def _environment_check(runs: Sequence[Smoke]) -> Dict[str, Any]:
    left = {name: value for smoke in runs for name, value in smoke.report.get("silencers", {}).items()}
    silenced = _silenced_lines(runs)
    if left:
        names = ", ".join(f"{name}={value}" for name, value in sorted(left.items()))
        return _check(
            "fallback line", False,
            f"{names} was still set inside the smoke test's process, so torch_npu's fallback line could "
            "be hidden",
            "find what sets it when that Python starts (a wrapper script, sitecustomize, a .pth file) and "
            "stop it there",
        )
    if silenced:
        return _check(
            "fallback line", False,
            f"the simulator counted fallbacks of {', '.join(silenced)} but no CAUTION line reached fd 2",
            "find what silences torch_npu's warnings in that Python (its start-up, or the C++ log level)",
        )
    return _check("fallback line", True,
                  "nothing silences it (RANK=0; " + ", ".join(SILENCERS[1:]) + " unset in the smoke test)")


def _step_check(name: str, runs: Sequence[Smoke]) -> Optional[Dict[str, Any]]:
    """Whether step ``name`` gave the CPU's results on the NPU (None when it did not run)."""
    ran = [smoke for smoke in runs if name in smoke.report.get("steps", {})]
    if not ran:
        return None
    result = ran[-1].report["steps"][name]
    fix = "python -m ascend_env install (patches and the startup hook), then verify again"
    if name == "isin":
        wrong = [f"{op}: {r['error']}" for op, r in result["overloads"].items() if not r["ok"]]
        if wrong:
            return _check(name, False, "; ".join(wrong), fix)
        return _check(name, True, f"all {len(result['overloads'])} overloads (out= included) ran on npu:0 "
                                  "and match the CPU")
    if not result.get("ok"):
        return _check(name, False, result.get("error") or "generate() failed", fix)
    return _check(name, True, "tiny Llama, greedy with 2 eos ids, min_new_tokens and suppress_tokens: "
                              "the same tokens on npu:0 as on the CPU")


def _isin_fallback_check(fallbacks: Mapping[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Fails when any isin overload fell back, by any evidence: fd-2 line, refusal or count."""
    isin = {op: item for op, item in fallbacks.items() if is_isin(op)}
    if not isin:
        return _check("isin fallback", True, "none: no CAUTION line, no refusal, nothing counted")
    parts = []
    for op, item in isin.items():
        evidence = [what for what, seen in (("CAUTION line on fd 2", item["line"]),
                                             ("refused by " + FALLBACK_DISABLE, item["refused"])) if seen]
        if item["count"]:
            evidence.append(f"counted {item['count']} times by the simulator")
        steps = f" in {', '.join(item['steps'])}" if item["steps"] else ""
        parts.append(f"{op} fell back to the CPU{steps} ({'; '.join(evidence)})")
    return _check("isin fallback", False, "; ".join(parts),
                  "python -m ascend_env install (patches and the startup hook), then verify again")


def _patches_check(installation: Mapping[str, Any]) -> Dict[str, Any]:
    if "error" in installation:
        return _check("patches", False, installation["error"], installation.get("fix"))
    patches = installation.get("patches", {})
    status = patches.get("status")
    files = patches.get("files") or {}
    if status == "applied" and files and all(kind == "clean" for kind in files.values()):
        status = "not applied"  # state recorded by an install --hook-only, every target file unpatched
    where = f"transformers {patches.get('transformers')} in {installation.get('site_packages')}"
    if status in BROKEN_PATCH_STATES:
        detail = f"{status}: {where}" + "".join(f"; {line}" for line in patches.get("drift", []))
        return _check("patches", False, detail,
                      f"python -m ascend_env {'install (re-applies)' if status == 'drifted' else 'status'}; "
                      f"{patches.get('run') or 'then verify again'}")
    if status == "unknown":
        return _check("patches", True, f"not checked: {patches.get('error')}")
    detail = f"{status}: {where}" + (f" ({patches['detail']})" if patches.get("detail") else "")
    if status == "not applied":
        detail += "; optional where the startup hook registers isin"
    return _check("patches", True, detail)


def _hook_check(runs: Sequence[Smoke], installation: Mapping[str, Any]) -> Dict[str, Any]:
    from ascend_env.detect.npu_oplists import ISIN_OVERLOADS

    site = installation.get("site_packages", "site-packages")
    fix_install = "python -m ascend_env install (or --hook-only), then verify again"
    if "error" not in installation and not installation.get("hook_files"):
        return _check("hook", False, f"the startup hook is not installed in {site}", fix_install)
    if installation.get("hook_disabled"):
        return _check("hook", False, "the startup hook is turned off by ASCEND_ENV_DISABLE",
                      "unset ASCEND_ENV_DISABLE (or set it to 0)")
    if "error" not in installation and not installation.get("hook_current"):
        return _check("hook", False, f"the startup hook's files in {site} differ from this ascend-env's",
                      fix_install)
    if "error" not in installation and not installation.get("hook_started"):
        return _check("hook", False, f"the startup hook's files are in {site}, but it did not run at "
                      "start-up", f"check that {site} is a site directory of that Python (python -m site)")
    records = [smoke.report["hook"] for smoke in runs if "hook" in smoke.report]
    if not records:
        return _check("hook", False, "not checked: the NPU backend did not start", "see the checks above")
    registered: List[str] = []
    for record in records:
        if record.get("errors"):
            return _check("hook", False, "the startup hook failed: " + "; ".join(record["errors"]),
                          "report it, with the output of: python -m ascend_env verify --json")
        if not record.get("events"):
            return _check("hook", False, "the startup hook ran but never saw the NPU backend start",
                          "import torch_npu (or enable the simulator) after start-up, as usual")
        covered = {*record["registered"], *record["native"]}
        missing = [op for op in ISIN_OVERLOADS if op not in covered]
        if missing:
            return _check("hook", False, f"{', '.join(missing)}: neither native nor registered by the hook",
                          fix_install)
        registered = list(record["registered"])
    return _check("hook", True, "ran at start-up; registered " + (", ".join(registered) or
                                                                  "nothing (every isin overload is native)"))


LOW_PERFORMANCE_64BIT = "Low Performance OP with 64-bit"


def _guard_fix(record: Mapping[str, Any]) -> str:
    """What to do about JIT compile being on, from what the compile-mode guard recorded."""
    guard = record.get("guard") or {}
    reason = str(guard.get("reason") or "")
    soc = record.get("soc")
    if guard.get("applied"):
        return ("the guard turned JIT compile off and the code turned it back on: drop that "
                "torch_npu.npu.set_compile_mode(jit_compile=True) call")
    if "no binary kernels" in reason and soc:
        from ascend_env.detect import socs

        family = socs.family(soc).lower() if socs.lookup(soc) else "<soc>"
        return (f"install the binary kernels (Ascend-cann-kernels-{family}); the startup hook then turns "
                "JIT compile off")
    if reason.startswith("turned off"):
        return ("run python -m ascend_env install without --no-compile-guard, with "
                "ASCEND_ENV_COMPILE_GUARD unset")
    return ("run: python -m ascend_env install (its startup hook turns JIT compile off where the binary "
            "kernels are installed)")


def _compile_check(runs: Sequence[Smoke]) -> Optional[Dict[str, Any]]:
    """No online compilation during ``generate()``: on a device, JIT compile off and no 64-bit
    line; on the simulator, no would-be online compile in the steady state of its generation."""
    record = next((s.report["compile"] for s in runs if "compile" in s.report), None)
    if record is None:
        return None
    lines = [line for s in runs for line in s.stderr.splitlines() if LOW_PERFORMANCE_64BIT in line]
    soc = record.get("soc")
    jit = record.get("jit_compile")
    said = "on" if jit else "off"
    if "steady_would_compile" in record:
        where = f"simulated {soc}" + (" (assumed: set ASCEND_ENV_SIM_SOC to model another)"
                                      if record.get("soc_assumed") else "")
        count = int(record["steady_would_compile"])
        if count == 0:
            return _check("compile mode", True, f"no online compiles in the steady state of generate() on "
                          f"{where} (JIT compile {said}; modelled, not measured)")
        ops = ", ".join(list(record.get("steady_would_compile_by_op", {}))[:4])
        return _check("compile mode", False,
                      f"{count} would-be online compiles in the steady state of generate() on {where} "
                      f"(JIT compile on: each new shape compiles before it runs; {ops})", _guard_fix(record))
    if "unmodelled" in record:
        return _check("compile mode", True, f"not modelled ({record['unmodelled']}); JIT compile {said} "
                      f"on simulated {soc}")
    if jit is None:
        return _check("compile mode", True, f"not checked: torch_npu has no is_jit_compile_false() ({soc})")
    if jit or lines:
        detail = f"JIT compile is on on {soc}: generate() compiles ops online" if jit else ""
        if lines:
            detail = (detail + "; " if detail else "") + f"torch_npu printed {lines[0].strip()}"
        return _check("compile mode", False, detail, _guard_fix(record))
    return _check("compile mode", True, f"JIT compile off on {soc}: prebuilt op_api kernels, no compiles")


def judge(
    runs: Sequence[Smoke], strict: bool = False, simulator_reason: Optional[str] = None
) -> Dict[str, Any]:
    """The verdict on the smoke test's runs: ``{"ok", "checks", "fallbacks", "findings", ...}``.

    It fails on any isin fallback, a wrong result, a silenced fallback line, drifted patches, a hook
    that did not run, a broken torch import or a backend that did not start; with ``strict``, on any
    fallback at all. Other fallbacks are findings.
    """
    first = runs[0].report
    backend: Dict[str, Any] = next((s.report["backend"] for s in runs if "backend" in s.report), {})
    result: Dict[str, Any] = {
        "ok": False, "schema": 1,
        "device": "npu" if backend.get("kind") == "npu" else "simulator",
        "device_name": backend.get("name"),
        "release": backend.get("release"),
        "simulator_reason": None if backend.get("kind") == "npu" else simulator_reason,
        "strict": strict,
        "fallback_disable": bool(first.get("backend", {}).get("fallback_disable")),
        "processes": len(runs),
    }
    checks: List[Dict[str, Any]] = []
    findings: List[str] = []
    for smoke in runs:
        if not smoke.report:
            tail = "\n".join(smoke.stderr.strip().splitlines()[-5:]) or "no output"
            checks.append(_check("smoke test", False,
                                 f"the smoke test process exited {smoke.returncode} without a report: {tail}",
                                 "run it by hand: python -m ascend_env.checks.smoke "
                                 "--report /tmp/report.json"))
        elif "error" in smoke.report:
            error = smoke.report["error"]
            checks.append(_check("smoke test", False, f"{error['type']}: {error['problem']}",
                                 "report it, with the output of: python -m ascend_env verify --json"))
        if "torch_error" in smoke.report:
            checks.append(_check("torch", False, f"import torch failed: {smoke.report['torch_error']}",
                                 "reinstall torch in that Python, then check: python -c 'import torch'"))
        if "device_error" in smoke.report:
            checks.append(_check("device", False, f"npu:0 did not start: {smoke.report['device_error']}",
                                 "check the NPU with npu-smi info, or run verify --simulate"))
    fallbacks = collect_fallbacks(runs)
    if first:
        checks.insert(0, _environment_check(runs))
    for step in STEPS:
        check = _step_check(step, runs)
        if check is not None:
            checks.append(check)
    if any(smoke.report.get("steps") for smoke in runs):
        checks.append(_isin_fallback_check(fallbacks))
    installation = first.get("installation", {})
    if installation:
        checks.append(_patches_check(installation))
        checks.append(_hook_check(runs, installation))
    compiled = _compile_check(runs)
    if compiled is not None:
        checks.append(compiled)
    others = {op: item for op, item in fallbacks.items() if not is_isin(op)}
    for op, item in others.items():
        times = f", {item['count']} times" if item["count"] else ""
        findings.append(f"{op} fell back to the CPU ({', '.join(item['steps']) or 'smoke test'}{times})")
    if strict and others:
        checks.append(_check("strict", False,
                             f"{len(others)} op(s) besides isin fell back: {', '.join(others)}",
                             "use a torch_npu release with NPU kernels for them, or drop --strict"))
    result.update(
        ok=bool(checks) and all(check["ok"] for check in checks),
        checks=checks, fallbacks=fallbacks, findings=findings, installation=installation,
        hook=next((s.report["hook"] for s in runs if "hook" in s.report), None),
        warnings=[w for smoke in runs for w in smoke.report.get("warnings", [])],
    )
    return result


def exit_code(result: Mapping[str, Any]) -> int:
    """0 when every check passed, else 1."""
    return 0 if result["ok"] else 1


def format_text(result: Mapping[str, Any]) -> str:
    """The short human report."""
    verdict = "passed" if result["ok"] else "FAILED"
    if result["device"] == "npu":
        where = f"on npu:0, a real Ascend NPU ({result['device_name']}, torch_npu {result['release']})"
    else:
        table = f"torch_npu {result['release']} op table" if result.get("release") else "no op table"
        where = f"on the simulator, not a real NPU ({table})"
        if result.get("simulator_reason"):
            where += f": {result['simulator_reason']}"
    lines = [f"verify: {verdict} {where}"]
    for check in result["checks"]:
        lines.append(f"  {'ok  ' if check['ok'] else 'FAIL'}  {check['name']}: {check['detail']}")
        if check.get("fix"):
            lines.append(f"        fix: {check['fix']}")
    for finding in result["findings"]:
        lines.append(f"  note  {finding}" + ("" if result["strict"] else " (fails only with --strict)"))
    return "\n".join(lines)
