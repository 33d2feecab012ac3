"""The transformers tree of this environment, copied, and checks that nothing in it was lost.

:class:`Tree` copies the installed transformers package and its dist-info once into a temporary
site-packages (``__pycache__`` left out), checks the copy against the wheel's RECORD, and keeps
it as the pristine source. Tests run ``install`` and ``restore`` on a second copy, the working
site, which :meth:`Tree.reset` brings back to pristine between runs (only changed files are
copied again). :meth:`Tree.check` classifies every file of the working site after a run.

Where transformers is not installed (the plain unit-test environments), the tree is the small fake
one of :mod:`fake_site` with its patches, so the same tests still run
(``ASCEND_ENV_RELIABILITY_TREE=fake`` forces it); :attr:`Tree.source` says which. Runs are made by
:func:`run_forked` (a forked child runs the CLI in-process: no interpreter start-up, so a random
kill lands in the work) or :func:`run_cli` (a fresh ``python -m ascend_env``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ascend_env.hook import files
from ascend_env.patching.faults import CRASH_ENV
from ascend_env.patching.manifest import load_manifest, patches_dir
from ascend_env.patching.records import parse_record, rewrite_record
from ascend_env.patching.state import drift, read_state
from ascend_env.patching.store import DIRECTORY

ROOT = Path(__file__).resolve().parents[2]
FileStat = Tuple[int, int, int]  # size, mtime_ns, inode


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _stat(path: Path) -> FileStat:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def walk(site: Path) -> Dict[str, Path]:
    """Every regular file or link under ``site`` by POSIX path relative to it."""
    out = {}
    for directory, dirs, filenames in os.walk(site):
        for name in filenames + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            path = Path(directory, name)
            out[path.relative_to(site).as_posix()] = path
    return out


def _installed_transformers() -> Optional[Tuple[Path, str]]:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("transformers")
    except PackageNotFoundError:
        return None
    site = Path(str(dist.locate_file(""))).resolve()
    dist_info = next(
        (p.name for p in site.glob("transformers-*.dist-info") if (p / "RECORD").is_file()), None
    )
    return None if dist_info is None else (site, dist_info)


@dataclass
class Counts:
    """What the reliability tests did, for the summary line."""

    runs: int = 0
    kills: int = 0
    crash_point_kills: int = 0
    signal_kills: int = 0
    kills_mid_transaction: int = 0
    bad_inputs: int = 0
    files_checked: int = 0
    fuzz_inputs: int = 0
    trees: List[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"reliability: {self.runs} runs, {self.kills} kills ({self.crash_point_kills} at crash points, "
            f"{self.signal_kills} by SIGKILL at random times, {self.kills_mid_transaction} of them with a "
            f"change in flight), {self.bad_inputs} bad inputs refused, {self.fuzz_inputs} fuzz inputs, "
            f"{self.files_checked} files checked; tree: {', '.join(sorted(set(self.trees))) or 'none'}"
        )


class Tree:
    """A pristine transformers tree and a working site-packages copy of it."""

    def __init__(self, root: Path, counts: Counts) -> None:
        self.counts = counts
        self.pristine = root / "pristine"
        self.site = root / "site-packages"
        installed = (
            None if os.environ.get("ASCEND_ENV_RELIABILITY_TREE") == "fake" else (_installed_transformers())
        )
        if installed is not None:
            source, dist_info = installed
            self.pristine.mkdir()
            shutil.copytree(
                source / "transformers",
                self.pristine / "transformers",
                ignore=shutil.ignore_patterns("__pycache__"),
            )
            shutil.copytree(source / dist_info, self.pristine / dist_info)
            self.patches = patches_dir()
            self.version = dist_info[len("transformers-") : -len(".dist-info")]
            self.source = f"installed transformers {self.version} ({source})"
        else:
            from fake_site import make_patches, make_site

            built = make_site(root / "fake")
            built.rename(self.pristine)
            self.patches = make_patches(root)
            dist_info = next(p.name for p in self.pristine.glob("transformers-*.dist-info"))
            self.version = dist_info[len("transformers-") : -len(".dist-info")]
            self.source = f"fake transformers {self.version} (transformers is not installed)"
        counts.trees.append(self.source)
        self.record_path = f"{dist_info}/RECORD"
        release = load_manifest(self.patches).releases[self.version]
        self.targets = {path: (change.before, change.after) for path, change in release.changes.items()}
        self.hook_files = {**files.files(), **files.bytecode()}
        self.pristine_record = (self.pristine / self.record_path).read_bytes()
        self.rows = {row.path: row for row in parse_record(self.pristine_record.decode("utf-8"))}
        self.files = walk(self.pristine)
        self.pristine_hash = self._verify_pristine()
        shutil.copytree(self.pristine, self.site)
        self.baseline = {rel: _stat(path) for rel, path in walk(self.site).items()}
        # The bytes an uninterrupted install writes, checked against the manifest.
        self.patched: Dict[str, bytes] = {}
        self.changes = 0

    def _verify_pristine(self) -> Dict[str, str]:
        hashes = {}
        for rel, path in self.files.items():
            data = path.read_bytes()
            row = self.rows.get(rel)
            if row is not None and row.hash and not row.matches(data):
                raise AssertionError(f"the source tree is not pristine: {rel} differs from its RECORD row")
            hashes[rel] = sha(data)
        for target, (before, _) in self.targets.items():
            assert hashes[target] == before, f"{target} is not the manifest's original"
        self.counts.files_checked += len(hashes)
        return hashes

    # -- running ------------------------------------------------------------------------------------

    def install_args(self, *extra: str) -> List[str]:
        return [
            "install",
            "--target",
            str(self.site),
            "--patches",
            "always",
            "--patches-dir",
            str(self.patches),
            *extra,
        ]

    def restore_args(self, *extra: str) -> List[str]:
        return ["restore", "--target", str(self.site), *extra]

    def learn_patched(self) -> None:
        """Install once, uninterrupted, and keep the bytes it wrote (checked against the manifest)."""
        self.reset()
        assert run_forked(self.install_args()) == 0
        for rel, (_, after) in self.targets.items():
            data = (self.site / rel).read_bytes()
            assert sha(data) == after, f"{rel} after install is not the manifest's patched file"
            self.patched[rel] = data
        record = (self.site / self.record_path).read_bytes()
        assert record == rewrite_record(self.pristine_record, self.patched)
        self.patched[self.record_path] = record
        state = read_state(self.site)
        assert state is not None
        self.changes = len(state.entries)
        self.reset()

    def reset(self) -> None:
        """Bring the working site back to the pristine tree (copying only what changed)."""
        current = walk(self.site)
        for rel, path in current.items():
            if rel not in self.baseline:
                path.unlink()
        shutil.rmtree(self.site / DIRECTORY, ignore_errors=True)
        for rel, stat in list(self.baseline.items()):
            path = self.site / rel
            try:
                same = _stat(path) == stat
            except FileNotFoundError:
                same = False
            if not same:
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.pristine / rel, path)
                self.baseline[rel] = _stat(path)

    # -- checking -----------------------------------------------------------------------------------

    def check(self, expect: str, full: bool = False) -> str:
        """Check every file of the working site; return "pristine" or "patched".

        ``expect`` is "pristine", "patched", "either" (a finished run: all one or all the other)
        or "killed" (just after a kill: each file old or new bytes, never truncated or mixed
        with anything else). A file whose size, mtime and inode are the baseline's is taken as
        unchanged unless ``full``; every other file is hashed.
        """
        found = walk(self.site)
        problems: List[str] = []
        states: Dict[str, str] = {}
        for rel in self.baseline:
            if rel not in found:
                problems.append(f"{rel} is missing")
        for rel, path in found.items():
            name = rel.rsplit("/", 1)[-1]
            if rel.startswith(DIRECTORY + "/"):
                continue
            if name.startswith(".write-"):
                problems.append(f"stray temporary file {rel}")
                continue
            if path.is_symlink():
                problems.append(f"{rel} is a link")
                continue
            if rel in self.hook_files:
                if path.read_bytes() != self.hook_files[rel]:
                    problems.append(f"hook file {rel} has other bytes (truncated?)")
                states[rel] = "patched"
                continue
            if rel not in self.baseline:
                problems.append(f"unexpected new file {rel}")
                continue
            if not full and _stat(path) == self.baseline[rel]:
                if rel in self.targets or rel == self.record_path:
                    states[rel] = "pristine"
                continue
            digest = sha(path.read_bytes())
            if digest == self.pristine_hash[rel]:
                if rel in self.targets or rel == self.record_path:
                    states[rel] = "pristine"
            elif rel in self.patched and digest == sha(self.patched[rel]):
                states[rel] = "patched"
            else:
                problems.append(f"{rel} is neither the original nor the patched bytes (sha256 {digest})")
        for name in self.hook_files:
            states.setdefault(name, "pristine")
        self.counts.files_checked += len(found)
        kinds = set(states.values())
        whole = kinds.pop() if len(kinds) == 1 else "mixed"
        state_dir = self.site / DIRECTORY
        if expect != "killed":
            if whole == "mixed":
                problems.append(f"mixed tree: {sorted(states.items())}")
            if expect in ("pristine", "patched") and whole != expect:
                problems.append(f"expected a {expect} tree, found {whole}")
            if whole == "pristine" and state_dir.exists():
                problems.append(f"{DIRECTORY} left behind: {sorted(walk(state_dir))}")
            if whole == "patched":
                problems.extend(self._check_state())
                problems.extend(self._check_record(found))
        if problems:
            raise AssertionError("; ".join(problems[:10]))
        return whole

    def _check_state(self) -> List[str]:
        state = read_state(self.site)
        if state is None:
            return ["a patched tree without state.json"]
        problems = [f"drift: {line}" for line in drift(self.site)]
        keep = {entry.before for entry in state.entries if entry.before}
        left = set(walk(self.site / DIRECTORY))
        wanted = {"lock", "state.json"} | {f"originals/{digest}" for digest in keep}
        if left != wanted:
            problems.append(f"{DIRECTORY} holds {sorted(left ^ wanted)} unexpectedly")
        for digest in keep:
            if sha((self.site / DIRECTORY / "originals" / digest).read_bytes()) != digest:
                problems.append(f"original {digest} is damaged")
        return problems

    def _check_record(self, found: Dict[str, Path]) -> List[str]:
        record = (self.site / self.record_path).read_bytes()
        problems = []
        for row in parse_record(record.decode("utf-8")):
            if not row.hash or row.path not in found:
                continue
            unchanged = self.rows.get(row.path) == row and _stat(found[row.path]) == self.baseline.get(
                row.path
            )
            if not unchanged and not row.matches(found[row.path].read_bytes()):
                problems.append(f"RECORD row for {row.path} does not match its bytes")
        return problems


# -- processes ------------------------------------------------------------------------------------------


def _child(argv: Sequence[str], env: Dict[str, str]) -> None:
    code = 70
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        sys.stdout = sys.stderr = open(os.devnull, "w")
        os.environ.update(env)
        from ascend_env.cli import main

        code = main(list(argv))
    finally:
        os._exit(code)


def fork(argv: Sequence[str], env: Optional[Dict[str, str]] = None) -> int:
    """Start ``ascend-env argv`` in a forked child (output discarded); returns its pid."""
    from ascend_env.cli import COMMANDS

    for name in COMMANDS:  # import every command once, in the parent, so children start at the work
        importlib.import_module("ascend_env.commands." + name.replace("-", "_"))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _child(argv, env or {})
    return pid


def wait(pid: int) -> int:
    """The exit code of ``pid`` (137 when killed by SIGKILL, as a shell reports it)."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def run_forked(argv: Sequence[str], crash: str = "") -> int:
    return wait(fork(argv, {CRASH_ENV: crash} if crash else {}))


def kill_after(argv: Sequence[str], delay: float) -> Tuple[int, float]:
    """Run ``argv`` forked and SIGKILL it after ``delay`` s; returns (exit code, seconds it ran)."""
    start = time.monotonic()
    pid = fork(argv)
    time.sleep(delay)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    code = wait(pid)
    return code, time.monotonic() - start


def run_cli(argv: Sequence[str], crash: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m ascend_env argv`` in a fresh interpreter."""
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run(
        [sys.executable, "-m", "ascend_env", *argv], capture_output=True, text=True, timeout=timeout, env=env
    )


def in_flight(site: Path) -> bool:
    """Whether a killed run left a journal (a change in flight)."""
    return (site / DIRECTORY / "journal.json").exists()


def crash_points(changes: int) -> List[str]:
    """Every crash point label of a commit with ``changes`` changes, in order."""
    from ascend_env.patching.faults import CRASH_POINTS

    out: List[str] = []
    for label in CRASH_POINTS:
        if label.startswith("change-N"):
            continue
        if label == "state":
            for index in range(changes):
                out += [f"change-{index}-temp", f"change-{index}"]
        out.append(label)
    return out


class Summary:
    """A pytest plugin object that prints ``counts`` in the terminal summary."""

    def __init__(self, title: str, counts: Counts) -> None:
        self.title = title
        self.counts = counts

    def pytest_terminal_summary(self, terminalreporter) -> None:
        terminalreporter.write_line(f"{self.title}: {self.counts.line()}")
        data = json.dumps(self.counts.__dict__, sort_keys=True)
        terminalreporter.write_line(f"{self.title} (json): {data}")


def summary(config, title: str) -> Counts:
    """A fresh :class:`Counts` that ``config``'s terminal summary will print under ``title``."""
    counts = Counts()
    config.pluginmanager.register(Summary(title, counts), f"ascend-env-reliability-{title}")
    return counts
