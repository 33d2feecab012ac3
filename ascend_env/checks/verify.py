"""``verify``: run the smoke test (:mod:`ascend_env.checks.smoke`) in fresh processes; judged by
:mod:`ascend_env.checks.verdict`, printed by :mod:`ascend_env.checks.verify_text`.

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

Which device (``--device``): ``npu`` runs on ``npu:0`` or fails; ``sim`` (also ``--simulate``,
``--torch-npu``) on the simulator; ``auto`` (the default) on ``npu:0`` when torch_npu imports and a
device answers. ``auto`` tells two machines apart: on one with an NPU (``/dev/davinci<N>``, or
``npu-smi info`` lists one) it is ``npu``, so a torch_npu that is not installed or does not start is
a failure that names the cause and the fix (CANN's ``set_env.sh`` not sourced, the everyday
mistake; torch_npu missing from this environment: install it, or pass ``--device sim`` on
purpose), never a pass on the simulator; on one without (a Docker build step), where torch_npu is
missing the smoke test runs on the simulator, and where it is installed but does not start the
smoke test runs again on the installed torch_npu's own binary on the emulated CANN (``--cann
emulated`` asks for that alone), else, where that cannot start (no C++ compiler, no emulated CANN),
on the simulator, with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` so that torch_npu cannot break ``import
torch``, and the report says why. On the simulator the fd-2 line is cross-checked against the
simulator's own counts.

The main smoke test reaches torch_npu through transformers' availability check (a ``find_spec``
probe, then the import), as most programs do; two more processes reach it through ``import
accelerate`` and a plain import. In each, the startup hook must have heard of torch_npu.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ascend_env import _audited
from ascend_env.checks.smoke import EMULATED, FALLBACK_DISABLE, IMPORTS, SILENCERS, STEPS
from ascend_env.checks.verdict import IMPORT_WORDS, judge
from ascend_env.checks.verify_result import Smoke, VerifyResult
from ascend_env.detect import machine
from ascend_env.exceptions import CheckFailed, EnvironmentProblem, UsageError
from ascend_env.sim import dispatch_model, startup
from ascend_env.utils import jsontext, progress
from ascend_env.utils.pyflags import child_flags

__all__ = [
    "AUDIT_VARIABLES",
    "AUTOLOAD",
    "DEVICES",
    "TIMEOUT",
    "Options",
    "child_environment",
    "run_smoke",
    "verify",
]

AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"
#: What an audit tells its processes; a verify run inside an audited command must not inherit it.
AUDIT_VARIABLES = (*startup.VARIABLES, _audited.REPORTS, dispatch_model.ENV)
TIMEOUT = 900.0  # seconds; the first run on the simulator may compile its extension
DEVICES = ("auto", "npu", "sim")


def child_environment(base: Mapping[str, str], *, simulate: bool, fallback_disable: bool) -> Dict[str, str]:
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


@dataclass
class Options:
    """What ``verify`` was asked to do."""

    python: str = sys.executable
    simulate: bool = False
    torch_npu: Optional[str] = None
    strict: bool = False
    timeout: float = TIMEOUT
    device: str = "auto"  # one of DEVICES; "sim" is what simulate says
    cann: Optional[str] = None  # "emulated": the installed torch_npu on the emulated CANN
    soc: Optional[str] = None  # the SoC to simulate (else $ASCEND_ENV_SOC), as audit's --soc


def run_smoke(
    options: Options, device: str, steps: Sequence[str], env: Mapping[str, str], imports: str = IMPORTS[0]
) -> Smoke:
    """Run ``python -m ascend_env.checks.smoke`` once and collect its report and fd 2."""
    smoke = Smoke(device=device, steps=list(steps), imports=imports)
    child_env = dict(env)
    with tempfile.TemporaryDirectory(prefix="ascend-env-verify-") as scratch:
        report = Path(scratch, "report.json")
        command = _smoke_command(options, report, device, steps, imports)
        started = time.monotonic()
        progress.say(f"smoke test command: {' '.join(command)}", verbose=True)
        with progress.step(_smoke_words(device, steps, imports)) as ending:
            with progress.forwarded(child_env) as fds:
                done = _run_child(options, command, child_env, fds)
            if report.is_file():  # a regular file (not a FIFO the child left), read without blocking
                smoke.report = json.loads(jsontext.read_regular(report).decode("utf-8"))
            skipped = smoke.report.get("imports", {}).get("skipped")
            if skipped:  # this way of reaching torch_npu could not be tried: say so, not "done"
                ending.outcome = f"not tried ({skipped})"
        smoke.seconds = time.monotonic() - started
        smoke.returncode = done.returncode
        smoke.stderr = done.stderr.decode("utf-8", "replace")
    _raise_environment_problem(options, smoke)
    return smoke


def _smoke_command(
    options: Options, report: Path, device: str, steps: Sequence[str], imports: str
) -> List[str]:
    command = [
        options.python,
        *child_flags(options.python),
        "-m",
        "ascend_env.checks.smoke",
        "--report",
        str(report),
        "--device",
        device,
        "--steps",
        ",".join(steps),
        "--imports",
        imports,
    ]
    if options.torch_npu:
        command += ["--torch-npu", options.torch_npu]
    return command


_DEVICE_WORDS = {
    "auto": "on npu:0 (else the emulated CANN or the simulated NPU)",
    "npu": "on npu:0",
    "sim": "on the simulated NPU",
    "emulated": "on the real torch_npu binary on the emulated CANN",
}


def _smoke_words(device: str, steps: Sequence[str], imports: str = IMPORTS[0]) -> str:
    """The progress line of one smoke test process."""
    where = f"smoke test in a fresh process {_DEVICE_WORDS.get(device, device)}: "
    if not steps:
        return where + f"the startup hook, torch_npu reached through {IMPORT_WORDS.get(imports, imports)}"
    fixes = [step for step in steps if step != "generate"]  # a step per fix of the registry
    said = [f"every overload of {', '.join(fixes)}"] if fixes else []
    return where + ", then ".join(said + (["a tiny Llama's generate()"] if "generate" in steps else []))


def _run_child(
    options: Options, command: Sequence[str], env: Mapping[str, str], pass_fds: Sequence[int] = ()
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            command,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=options.timeout,
            pass_fds=tuple(pass_fds),
        )
    except subprocess.TimeoutExpired:
        raise CheckFailed(
            f"the smoke test did not finish within {options.timeout:.0f} s in {options.python}.",
            "run it by hand to see where it hangs: python -m ascend_env.checks.smoke --report /tmp/r.json",
        ) from None
    except OSError as exc:
        raise UsageError(
            f"cannot run {options.python}: {exc.strerror or exc}.",
            "pass --python the path of a Python interpreter",
        ) from None


def _raise_environment_problem(options: Options, smoke: Smoke) -> None:
    """A target Python that cannot run the smoke test is the environment's problem, not a verdict."""
    if not smoke.report and "No module named" in smoke.stderr and "ascend_env" in smoke.stderr:
        from ascend_env import origin

        raise EnvironmentProblem(
            f"{options.python} cannot import ascend_env, so the smoke test cannot run there.",
            f"install this ascend-env into it: {origin.install_command(options.python)}",
        )
    error = smoke.report.get("error")
    if error and error.get("environment"):
        raise EnvironmentProblem(error["problem"], error.get("fix"))


def verify(options: Options, environ: Optional[Mapping[str, str]] = None) -> VerifyResult:
    """Run the smoke test as ``options`` say and return the judged result (see :func:`judge`)."""
    environ = _with_soc(os.environ if environ is None else environ, options.soc)
    options = _resolved(options)
    started = time.monotonic()
    runs, reason = _run_all(options, environ)
    result = judge(runs, strict=options.strict, simulator_reason=reason)
    result.python = options.python
    result.seconds = round(time.monotonic() - started, 2)
    return result


def _with_soc(environ: Mapping[str, str], soc: Optional[str]) -> Dict[str, str]:
    """``environ`` with ``--soc`` as ``$ASCEND_ENV_SOC`` (UsageError for an unknown SoC), and the
    deprecated ``$ASCEND_ENV_SIM_SOC`` passed on under that name."""
    from ascend_env.detect import socs
    from ascend_env.sim import compile_mode

    env = dict(environ)
    if soc:
        env[compile_mode.SOC_ENV] = socs.canonical(soc)
    compile_mode.export_soc(env)
    return env


def _resolved(options: Options) -> Options:
    """``options`` with the interpreter's full path and the canonical release (UsageError if neither)."""
    from ascend_env.sim import optables

    python = shutil.which(options.python) or options.python
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise UsageError(
            f"--python {options.python}: not an executable file.",
            "pass the path of a Python interpreter, e.g. /opt/venv/bin/python",
        )
    # An unknown release raises UsageError here, before any process starts.
    release = optables.canonical(options.torch_npu) if options.torch_npu else None
    return dataclasses.replace(options, python=python, torch_npu=release)


def _run_all(options: Options, environ: Mapping[str, str]) -> Tuple[List[Smoke], Optional[str]]:
    """Every smoke test process ``options`` call for, and why the simulator ran (None: it did not)."""
    device, reason = _chosen_device(options)
    npu_machine: Optional[str] = None
    if device == "auto":
        has_npu, evidence = machine.has_npu()
        if has_npu:
            # On a machine with an NPU, auto is npu: torch_npu must start here, installed or not
            # (the simulator would pass a CI step run in an environment without torch_npu).
            device, npu_machine = "npu", evidence
    first = run_smoke(
        options,
        device,
        STEPS,
        child_environment(environ, simulate=device not in ("npu", "auto"), fallback_disable=True),
    )
    if npu_machine is not None and "device_error" in first.report:
        first.report["npu_machine"] = npu_machine  # a failure that names the cause, never a simulated pass
        first.report["cann"] = _cann_fix(environ)
        return [first], None
    if device == "auto" and "device_error" in first.report:
        has_npu, evidence = machine.has_npu()
        why = (first.report["device_error"].strip().splitlines() or ["no reason given"])[0]
        reason = f"torch_npu is installed but did not start ({why}), and this machine has no NPU ({evidence})"
        first, reason = _without_npu(options, environ, reason)
    reason = reason or first.report.get("simulator_reason")
    if reason and first.report.get("backend", {}).get("chosen") == "oldest":
        reason += (
            "; no release named and none installed, so the oldest supported release's table, "
            "which lacks the most NPU kernels"
        )
    runs = [first]
    kind = first.report.get("backend", {}).get("kind")
    device = {"npu": "npu", EMULATED: "emulated"}.get(str(kind), "sim")
    if "generate" in first.report.get("deferred", []):
        # torch_npu reads TORCH_NPU_FALLBACK_CPU_DISABLE once per process: generate() needs its own.
        runs.append(
            run_smoke(
                options,
                device,
                ["generate"],
                child_environment(environ, simulate=device != "npu", fallback_disable=False),
            )
        )
    if kind is not None:
        env = child_environment(environ, simulate=device != "npu", fallback_disable=False)
        runs += _import_order_runs(options, device, env)
    return runs, reason


def _without_npu(options: Options, environ: Mapping[str, str], reason: str) -> Tuple[Smoke, str]:
    """The first smoke test again on a machine without an NPU where torch_npu did not start: the
    real binary on the emulated CANN where this ascend-env ships it, it starts and every entry point
    the binary calls is emulated; else the simulator, and the reason says why."""
    from ascend_env.sim import emulated

    if emulated.available() is None:
        env = child_environment(environ, simulate=True, fallback_disable=True)
        try:
            smoke = run_smoke(options, "emulated", STEPS, env)
        except EnvironmentProblem as exc:  # no binaries to emulate under, no compiler: say so
            reason += f"; the emulated CANN could not run it ({exc.problem.splitlines()[0]})"
        else:
            missing = emulated.unimplemented(smoke.report.get("emulated_cann") or {})
            missing += [name for name in emulated.unimplemented_in(smoke.stderr) if name not in missing]
            if "device_error" not in smoke.report and not missing:
                return smoke, reason + ": the real binary ran on the emulated CANN"
            if missing:  # not proven there: the automatic choice takes the next best, and says why
                reason += (
                    f"; the real binary on the emulated CANN proved nothing (it called "
                    f"{', '.join(missing)}, which the emulated CANN does not implement: verify --cann "
                    "emulated shows that run)"
                )
            else:
                why_not = (smoke.report["device_error"].strip().splitlines() or ["no reason given"])[0]
                reason += f"; the emulated CANN could not run it ({why_not})"
    smoke = run_smoke(options, "sim", STEPS, child_environment(environ, simulate=True, fallback_disable=True))
    return smoke, reason


def _chosen_device(options: Options) -> Tuple[str, Optional[str]]:
    """The smoke test's ``--device`` and, for the simulator or the emulated CANN, why."""
    if options.device not in DEVICES:
        raise UsageError(
            f"--device {options.device}: not one of {', '.join(DEVICES)}.", "pass --device npu, sim or auto"
        )
    if options.cann == "emulated":
        if options.torch_npu or options.simulate or options.device != "auto":
            raise UsageError(
                "--cann emulated runs the installed torch_npu's own binary, so it takes neither "
                "--torch-npu, --simulate nor --device.",
                "drop them, or drop --cann emulated to run on the simulator or the NPU",
            )
        return "emulated", "--cann emulated was given"
    if options.torch_npu:
        if options.device == "npu":
            raise UsageError(
                "--torch-npu simulates a release's op table, so it cannot run on --device npu.",
                "drop --torch-npu to verify the real NPU, or --device npu to simulate",
            )
        return "sim", "--torch-npu was given"
    if options.simulate or options.device == "sim":
        return "sim", "--simulate was given" if options.simulate else "--device sim was given"
    return options.device, None


def _import_order_runs(options: Options, device: str, env: Mapping[str, str]) -> List[Smoke]:
    """One process per other way of reaching torch_npu (``import accelerate``, a plain import),
    run side by side: each only starts the backend and keeps the hook's record."""
    others = [order for order in IMPORTS if order != IMPORTS[0]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(others)) as pool:
        return list(pool.map(lambda order: run_smoke(options, device, [], env, order), others))


_SET_ENV = "<toolkit>/set_env.sh (e.g. in /usr/local/Ascend/ascend-toolkit)"


def _cann_fix(environ: Mapping[str, str]) -> str:
    """How to set CANN's environment up, naming its ``set_env.sh`` where one is found."""
    from ascend_env.detect import cann

    toolkit = cann.find_toolkit(environ)
    script = cann.set_env_script(toolkit.root) if toolkit.root is not None else None
    where = str(script) if script is not None else _SET_ENV
    return f"source {where} in this shell (CANN's libraries), then verify again"
