"""The README's walkthrough, as a newcomer runs it, in a fresh virtual environment.

``pip install ".[sim]"`` from this checkout, then ``verify --torch-npu 2.1.0.post6`` fails (exit 1)
on the isin fallback, ``install``, ``verify`` passes (exit 0), ``status``, ``restore``, and
``verify`` with ``-q`` and ``-v``; every step's words and exit code are checked, and the progress
lines on stderr (the first verify builds the
simulated NPU's backend into an empty cache, and says so). The venv is new: pip installs ascend-env
and transformers into it; torch and the other dependencies come from this environment through a
directory of links (no 1 GB copy, and nothing downloaded but what the sim extra adds).

The same run writes the examples of README.md, docs/verify.md, docs/hook.md and docs/simulator.md (the blocks
between ``<!-- example: NAME -->`` and ``<!-- /example -->``): with ``ASCEND_ENV_EXAMPLES_RECORD=1``
it rewrites them, else it compares them, with the numbers of seconds and the cache's digest left
out of the comparison (a timing is never an assertion). They are recorded on Python 3.11 with the
torch env's torch and transformers; elsewhere the walkthrough runs and the comparison is skipped.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path
from typing import Dict, List, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRANSFORMERS = importlib.metadata.version("transformers")
TORCH = importlib.metadata.version("torch")
RECORD = os.environ.get("ASCEND_ENV_EXAMPLES_RECORD") == "1"
DOCS = {
    "README.md": ROOT / "README.md",
    "docs/hook.md": ROOT / "docs" / "hook.md",
    "docs/simulator.md": ROOT / "docs" / "simulator.md",
    "docs/verify.md": ROOT / "docs" / "verify.md",
}
# Where the examples say the venv and the cache are.
SHOWN_VENV, SHOWN_CACHE = "/opt/venv", "~/.cache/ascend-env"

pytestmark = pytest.mark.skipif(
    TRANSFORMERS != "4.46.3",
    reason=f"the sim extra pins transformers 4.46.3; this environment has {TRANSFORMERS}, whose "
    "release the transformers matrix covers",
)


class Step(NamedTuple):
    command: str
    returncode: int
    stdout: str
    stderr: str


def _linked_dependencies(target: Path) -> None:
    """Links to this environment's installed distributions, except transformers and ascend-env
    (which the walkthrough's pip installs), accelerate (which the sim extra does not bring) and the
    .pth files (startup hooks of other venvs)."""
    target.mkdir()
    skip = re.compile(r"^(transformers|ascend_env|ascend-env|accelerate)([-_.].*)?$|\.pth$|^__pycache__$")
    for entry in sys.path:
        if not entry.endswith("-packages") or not Path(entry).is_dir():
            continue
        for item in Path(entry).iterdir():
            if not skip.match(item.name) and not (target / item.name).exists():
                (target / item.name).symlink_to(item)


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory) -> Dict[str, object]:
    root = tmp_path_factory.mktemp("walkthrough")
    env_dir, cache = root / "venv", root / "cache"
    venv.EnvBuilder(with_pip=True, symlinks=True).create(env_dir)
    site = next(env_dir.glob("lib/python*/site-packages"))
    _linked_dependencies(root / "deps")
    (site / "zz_dependencies.pth").write_text(f"{root / 'deps'}\n")
    base = {
        "PATH": f"{env_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": os.environ["HOME"],
        "ASCEND_ENV_CACHE_DIR": str(cache),
    }
    for name in ("CXX", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE"):
        if name in os.environ:
            base[name] = os.environ[name]
    steps: List[Step] = []

    def run(command: str, cwd: Path = root) -> Step:
        # As a Docker RUN step runs it: stdin closed, no TTY, a small environment.
        done = subprocess.run(
            ["sh", "-c", "exec 0<&-\n" + command],
            env=base,
            capture_output=True,
            text=True,
            cwd=str(cwd),
            timeout=1200,
        )
        step = Step(command, done.returncode, done.stdout, done.stderr)
        steps.append(step)
        return step

    run('pip install -q ".[sim]"', cwd=ROOT)
    for command in (
        "python -m ascend_env verify --torch-npu 2.1.0.post6",
        "python -m ascend_env install",
        "python -m ascend_env verify --torch-npu 2.1.0.post6",
        "python -m ascend_env status",
        "python -m ascend_env restore",
        "python -m ascend_env status",
        "python -m ascend_env -q verify --torch-npu 2.1.0.post6",
        "python -m ascend_env verify -v --torch-npu 2.1.0.post6 --json",
    ):
        run(command)
    return {"steps": steps, "site": site, "venv": env_dir, "cache": cache}


def _step(walkthrough: Dict[str, object], index: int) -> Step:
    steps = walkthrough["steps"]
    assert isinstance(steps, list)
    step = steps[index]
    assert "Traceback" not in step.stdout + step.stderr, step
    return step


def test_the_sim_extra_installs_ascend_env_and_transformers_into_the_venv(walkthrough):
    step = _step(walkthrough, 0)
    assert step.returncode == 0, step.stderr
    site = walkthrough["site"]
    assert (site / "ascend_env" / "__init__.py").is_file()
    assert (site / "transformers" / "__init__.py").is_file()  # the venv's own, which install patches


def test_verify_fails_first_on_the_isin_fallback_and_says_what_it_is_doing(walkthrough):
    step = _step(walkthrough, 1)
    assert step.returncode == 1, step.stdout + step.stderr
    lines = step.stdout.splitlines()
    assert lines[0] == (
        "verify: FAILED on the simulator, not a real NPU (torch_npu 2.1.0.post6 op table): "
        "--torch-npu was given"
    )
    assert any(
        line.startswith("  FAIL  isin fallback: aten::isin.Tensor_Tensor_out fell back to the CPU")
        for line in lines
    )
    assert f"  FAIL  hook: the startup hook is not installed in {walkthrough['site']}" in lines
    fix = (
        "        fix: python -m ascend_env install (the startup hook; the patches too where torch_npu has "
        "no NPU isin), then verify again"
    )
    assert fix in lines
    assert lines[-1].startswith("verify: FAILED: ") and "failed: isin fallback, " in lines[-1]
    assert lines[-1].endswith(" fallback, hook (fix lines above)")
    # stderr: progress only, and the first run builds the backend into the empty cache, once.
    progress = step.stderr.splitlines()
    assert progress and all(line.startswith("ascend-env: ") for line in progress), step.stderr
    building = [line for line in progress if "building the simulated NPU's C++ backend" in line]
    assert len(building) == 2, progress
    assert f"later runs reuse it from {walkthrough['cache']}/sim-" in building[0]
    assert re.search(r": done in [\d.]+ (s|min)$", building[1])
    assert progress[0].startswith("ascend-env: smoke test in a fresh process on the simulated NPU")
    # accelerate is not installed here: its process says "not tried", as the hook check does, not "done".
    accelerate = [line for line in progress if "through import accelerate:" in line]
    assert len(accelerate) == 1 and re.search(
        r"through import accelerate: not tried \(accelerate is not installed\), after [\d.]+ (s|min)$",
        accelerate[0],
    ), progress


def test_install_then_verify_passes_without_building_again(walkthrough):
    install = _step(walkthrough, 2)
    assert install.returncode == 0, install.stderr
    site = walkthrough["site"]
    # No torch_npu here: nothing to patch (--patches auto), the startup hook alone (docs/states.md).
    assert install.stdout.startswith(f"hook installed: transformers 4.46.3 in {site}\n")
    assert "  torch_npu is not installed, so isin never reaches the NPU: no patch needed" in install.stdout
    assert install.stdout.endswith(
        "install: hook installed: the startup hook is installed; transformers' "
        "files are not patched (status: hook only)\n"
    )
    verify = _step(walkthrough, 3)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.startswith(
        "verify: passed on the simulator, not a real NPU (torch_npu 2.1.0.post6 op table)"
    )
    assert "  FAIL" not in verify.stdout
    assert f"  ok    patches: not applied: transformers 4.46.3 in {site}; optional where" in verify.stdout
    registered = "registered isin.Tensor_Tensor, isin.Tensor_Tensor_out"
    # The sim extra brings no accelerate: that path is said to be untried, the others heard.
    assert (
        "  ok    hook: heard of torch_npu through transformers' check, a plain import (not tried: "
        f"import accelerate (accelerate is not installed)); {registered}"
    ) in verify.stdout
    assert re.search(r"\nverify: passed: all \d+ checks passed\n$", verify.stdout)
    assert "building" not in verify.stderr  # built once, by the first verify


def test_status_and_restore_say_the_same_as_install(walkthrough):
    site = walkthrough["site"]
    status = _step(walkthrough, 4)
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.startswith(f"hook only: transformers 4.46.3 in {site}\n")
    assert "  startup hook: ran in a fresh process; waits for torch_npu (not installed)\n" in status.stdout
    assert status.stdout.endswith(
        "status: hook only: the startup hook is installed; transformers' files are not patched\n"
    )
    restore = _step(walkthrough, 5)
    assert restore.returncode == 0 and restore.stdout.startswith(f"restored: {site}\n")
    assert restore.stdout.splitlines()[-1].startswith("restore: restored: ")
    after = _step(walkthrough, 6)
    assert after.returncode == 1
    assert after.stdout.startswith(f"not applied: transformers 4.46.3 in {site}\n")
    assert after.stdout.endswith(
        "  run: python -m ascend_env install\nstatus: not applied: the startup hook is not installed\n"
    )
    again = _step(walkthrough, 7)
    assert again.returncode == 1 and again.stdout.startswith("verify: FAILED")


def test_quiet_says_nothing_and_verbose_says_each_step_without_touching_stdout(walkthrough):
    quiet = _step(walkthrough, 7)
    assert quiet.returncode == 1 and quiet.stderr == ""
    verbose = _step(walkthrough, 8)
    assert verbose.returncode == 1
    assert json.loads(verbose.stdout)["ok"] is False  # --json: stdout is one document
    lines = verbose.stderr.splitlines()
    assert all(line.startswith("ascend-env: ") for line in lines), verbose.stderr
    said = "\n".join(lines)
    assert "ascend-env: smoke test command: " in said
    assert "ascend-env: smoke test: starting the device (sim: " in said
    assert "ascend-env: smoke test step generate on npu:0 (simulator): done in " in said


# -- the docs' examples ----------------------------------------------------------------------------

_BLOCK = re.compile(
    r"(<!-- example: (?P<name>[\w-]+) -->\n```console\n)(?P<body>.*?)(```\n<!-- /example -->)", re.S
)
_SECONDS = re.compile(r"\b\d+(\.\d+)? (s|min)\b")
_DIGEST = re.compile(r"(sim-[\w.]+-)[0-9a-f]{12}")


def _shown(walkthrough: Dict[str, object], step: Step, stderr: bool = False) -> str:
    """A step as the docs show it: the command, then its output with the docs' paths."""
    text = (step.stderr if stderr else "") + step.stdout
    text = text.replace(str(walkthrough["cache"]), SHOWN_CACHE).replace(str(walkthrough["venv"]), SHOWN_VENV)
    return f"$ {step.command}\n{text}"


def examples(walkthrough: Dict[str, object]) -> Dict[str, str]:
    """Each example block's text, from the walkthrough's steps."""
    step = lambda index: _step(walkthrough, index)  # noqa: E731
    first = step(1)
    building = "".join(line + "\n" for line in first.stderr.splitlines() if "C++ backend" in line)
    return {
        "verify-fails": _shown(walkthrough, first, stderr=True),
        "install": _shown(walkthrough, step(2)),
        "verify-passes": _shown(walkthrough, step(3)),
        "status": _shown(walkthrough, step(4)),
        "build": f"$ {first.command}\n{building}".replace(str(walkthrough["cache"]), SHOWN_CACHE),
    }


def _comparable(text: str) -> str:
    lines = _DIGEST.sub(r"\1<digest>", _SECONDS.sub("<N> s", text)).split("\n")
    return "\n".join(_in_start_order(lines))


def _in_start_order(lines: List[str]) -> List[str]:
    """Steps that run side by side (verify's import-path processes) start and end in either order:
    compare each run of consecutive start lines (``... ``), and of "done" lines, sorted."""
    run: List[str] = []
    out: List[str] = []
    kind = None
    for line in lines + [""]:
        ended = line.endswith(": done in <N> s") or line.endswith(", after <N> s")  # "not tried (...), after"
        this = "done" if ended else "start" if line.endswith(" ...") else None
        if this is not None and this == kind:
            run.append(line)
            continue
        out += sorted(run)
        run, kind = [line], this
    return out


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11) or not TORCH.startswith("2.13.0"),
    reason="the docs' examples are recorded on Python 3.11 with torch 2.13.0",
)
def test_the_docs_examples_are_what_the_walkthrough_printed(walkthrough):
    wanted = examples(walkthrough)
    found = set()
    for name, path in DOCS.items():
        text = path.read_text(encoding="utf-8")

        def replace(match: re.Match, page: str = name) -> str:
            found.add(match["name"])
            body = wanted[match["name"]]
            if not RECORD:
                assert _comparable(match["body"]) == _comparable(body), (
                    f"{page}'s example {match['name']!r} differs from what the command printed; "
                    "re-record with ASCEND_ENV_EXAMPLES_RECORD=1 and review the diff"
                )
            return match.group(1) + body + match.group(4)

        updated = _BLOCK.sub(replace, text)
        if RECORD and updated != text:
            path.write_text(updated, encoding="utf-8")
    assert found == set(wanted), f"example blocks missing from the docs: {set(wanted) - found}"
