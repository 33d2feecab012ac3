"""The simulated NPU's build cache (``ascend_env.sim.build``) as another user left it. No torch:
``build_dir`` (which asks torch its version) is replaced by a fixed directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.sim import build

ROOT = Path(build.__file__).resolve().parents[2]


def test_a_cache_this_user_cannot_read_says_whose_it_is_and_the_fix(monkeypatch, tmp_path):
    target = tmp_path / "cache" / "sim-2.13.0-abc"
    monkeypatch.setattr(build, "build_dir", lambda: target)
    real_exists = Path.exists

    def exists(path: Path, *args, **kwargs) -> bool:
        if path == target / build.LIBRARY_NAME:
            raise PermissionError(13, "Permission denied", str(path))
        return real_exists(path, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)
    with pytest.raises(EnvironmentProblem) as caught:
        build.ensure_built()
    assert caught.value.problem == (
        f"the simulated NPU's build cache {target} cannot be read by this user (uid {os.geteuid()}): "
        f"Permission denied (it belongs to uid {os.geteuid()}); another user built it."
    )
    assert "ASCEND_ENV_CACHE_DIR" in str(caught.value.fix)


NOBODY = 65534
PROBE = (
    "import sys; from pathlib import Path; from ascend_env.sim import build; "
    "build.build_dir = lambda: Path(sys.argv[1]); build.ensure_built()"
)


def test_roots_cache_used_by_another_user_is_an_environment_problem():
    """Root built the cache (mode 700, as ensure_built makes it); nobody runs with the same
    ASCEND_ENV_CACHE_DIR: an EnvironmentProblem with its fix, not a PermissionError."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    env = dict(os.environ, HOME="/", PYTHONPATH=str(ROOT))
    python = next(
        (
            candidate
            for candidate in (sys.executable, "/usr/bin/python3")
            if os.path.exists(candidate)
            and subprocess.run(
                [*prefix, candidate, "-c", "import ascend_env.sim.build"], env=env, capture_output=True
            ).returncode
            == 0
        ),
        None,
    )
    if python is None:
        pytest.skip("no Python here that an unprivileged user can run ascend_env with")
    root = Path(tempfile.mkdtemp(prefix="ascend-env-cache-"))
    try:
        root.chmod(0o755)
        cache = root / "cache"
        target = cache / "sim-2.13.0-abc"
        target.mkdir(parents=True)
        (target / build.LIBRARY_NAME).write_bytes(b"")
        cache.chmod(0o700)
        env["ASCEND_ENV_CACHE_DIR"] = str(cache)
        result = subprocess.run(
            [*prefix, python, "-c", PROBE, str(target)], env=env, capture_output=True, text=True, timeout=60
        )
        problem, fix = result.stderr.strip().splitlines()[-2:]
        assert problem == (
            f"ascend_env.exceptions.EnvironmentProblem: the simulated NPU's build cache {target} cannot "
            f"be read by this user (uid {NOBODY}): Permission denied (it belongs to uid 0); another user "
            "built it."
        ), result.stderr
        assert fix.startswith("  fix: set ASCEND_ENV_CACHE_DIR to a directory of your own")
    finally:
        shutil.rmtree(root)
