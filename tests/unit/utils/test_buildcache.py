"""The build cache: a library is built, kept and loaded only where no other user could change it.

The attacks are root's (sudo without -H, a cache under a shared directory): a cache whose path
another user can swap while the compiler runs lets that user point root's writes at a file of
their choosing. Each test builds through :func:`buildcache.ensure_built` with a fake compiler.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import List

import pytest

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.utils import buildcache

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def _build(directory: Path, calls: List[Path], script: str = "printf built > '{output}'") -> buildcache.Build:
    def command(output: Path) -> List[str]:
        calls.append(output)
        return ["sh", "-c", script.format(output=output)]

    return buildcache.Build(directory, "libx.so", command, "the test", "building x", "once")


def _cache(monkeypatch: pytest.MonkeyPatch, root: Path) -> Path:
    monkeypatch.setenv("ASCEND_ENV_CACHE_DIR", str(root))
    return root


def _refused(build: buildcache.Build, calls: List[Path], *words: str) -> EnvironmentProblem:
    with pytest.raises(EnvironmentProblem) as info:
        buildcache.ensure_built(build)
    for word in words:
        assert word in info.value.problem
    assert "ASCEND_ENV_CACHE_DIR" in (info.value.fix or "")
    assert calls == []
    return info.value


def test_a_private_cache_builds_once_with_every_directory_0700(tmp_path, monkeypatch):
    """umask 002 (Debian and Ubuntu accounts with a private group): the directories the cache makes
    are 0700 all the way down, not only the last one, so it accepts what it has just made."""
    root = _cache(monkeypatch, tmp_path / "a" / "b" / "cache")
    calls: List[Path] = []
    build = _build(root / "sim-x", calls)
    old = os.umask(0o002)
    try:
        library = buildcache.ensure_built(build)
    finally:
        os.umask(old)
    assert library.read_text() == "built" and len(calls) == 1
    for directory in (tmp_path / "a", tmp_path / "a" / "b", root, root / "sim-x"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert buildcache.ensure_built(build) == library and len(calls) == 1


def test_a_cache_below_a_directory_anyone_can_write_is_refused_unless_sticky(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    calls: List[Path] = []
    root = _cache(monkeypatch, shared / "cache")
    error = _refused(
        _build(root / "sim-x", calls), calls, f"is inside {shared}, which is writable by other users"
    )
    assert "run as you" in error.problem
    assert not root.exists()  # nothing made there
    shared.chmod(0o1777)
    assert buildcache.ensure_built(_build(root / "sim-x", calls)).read_text() == "built"


def test_a_link_on_the_way_to_a_directory_anyone_can_write_is_refused(tmp_path, monkeypatch):
    """The link is this user's own; its target is walked too."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".cache").symlink_to(shared)
    calls: List[Path] = []
    root = _cache(monkeypatch, tmp_path / "home" / ".cache" / "ascend-env")
    _refused(_build(root / "sim-x", calls), calls, f"is inside {shared}, which is writable by other users")
    assert list(shared.iterdir()) == []


@as_root
def test_root_never_makes_a_cache_inside_another_users_home(tmp_path, monkeypatch):
    """sudo without -H: ~/.cache does not exist yet; root must not create it there (the user
    could rename it away while the compiler runs and plant their own)."""
    home = tmp_path / "alice"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    calls: List[Path] = []
    root = _cache(monkeypatch, home / ".cache" / "ascend-env")
    _refused(
        _build(root / "sim-x", calls),
        calls,
        f"is inside {home}, which belongs to another user (uid {NOBODY})",
    )
    assert list(home.iterdir()) == []


@as_root
def test_root_refuses_a_root_owned_cache_inside_another_users_home(tmp_path, monkeypatch):
    """The old check stopped at the first root-owned directory (a ~/.cache root had made earlier):
    the walk goes on to /."""
    home = tmp_path / "alice"
    (home / ".cache").mkdir(parents=True)
    (home / ".cache").chmod(0o755)
    os.chown(home, NOBODY, NOBODY)
    calls: List[Path] = []
    root = _cache(monkeypatch, home / ".cache" / "ascend-env")
    _refused(_build(root / "sim-x", calls), calls, f"is inside {home}, which belongs to another user")


@as_root
def test_root_refuses_another_users_link_to_a_root_directory(tmp_path, monkeypatch):
    """~/.cache is the user's symbolic link to a directory of root's: the user can point it
    elsewhere at any time."""
    base = tmp_path / "base"
    target = tmp_path / "roots"
    base.mkdir()
    target.mkdir()
    link = base / ".cache"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    calls: List[Path] = []
    root = _cache(monkeypatch, link / "ascend-env")
    _refused(
        _build(root / "sim-x", calls),
        calls,
        f"is inside {link}, a symbolic link that belongs to another user (uid {NOBODY})",
    )
    assert list(target.iterdir()) == []


@as_root
def test_root_refuses_a_cache_two_levels_below_a_shared_group_directory(tmp_path, monkeypatch):
    """A directory its group can write (a group that is not its owner's private one) lets the
    group's members rename what is below it, at any depth."""
    shared = tmp_path / "srv"
    deep = shared / "team" / "tools"
    deep.mkdir(parents=True)
    os.chown(shared, 0, NOBODY)
    shared.chmod(0o775)
    calls: List[Path] = []
    root = _cache(monkeypatch, deep / "cache")
    _refused(_build(root / "sim-x", calls), calls, f"is inside {shared}, which is writable by its group")


def test_a_group_writable_directory_of_the_owners_private_group_is_accepted(tmp_path, monkeypatch):
    """umask 002 made ~/.cache 0775 with the user's private group: only the user is in it."""
    home_cache = tmp_path / "cache-home"
    home_cache.mkdir()
    home_cache.chmod(0o775)
    info = home_cache.stat()
    private = buildcache._private_group(info.st_uid, info.st_gid)
    calls: List[Path] = []
    build = _build(_cache(monkeypatch, home_cache / "ascend-env") / "sim-x", calls)
    if private:
        assert buildcache.ensure_built(build).read_text() == "built"
    else:
        _refused(build, calls, "is writable by its group")


def test_private_group_tells_a_private_group_from_a_shared_one():
    import grp
    import pwd

    me = pwd.getpwuid(os.geteuid())
    own = grp.getgrgid(me.pw_gid)
    expected = own.gr_name == me.pw_name and set(own.gr_mem) <= {me.pw_name}
    assert buildcache._private_group(me.pw_uid, me.pw_gid) is expected
    others = [g for g in grp.getgrall() if g.gr_gid != me.pw_gid]
    assert others and not any(buildcache._private_group(me.pw_uid, g.gr_gid) for g in others)
    assert buildcache._private_group(me.pw_uid, 2**31 - 7) is False  # no such group


def test_a_failed_build_writes_its_log_in_place_of_a_planted_link(tmp_path, monkeypatch):
    """The log is written through the build directory's descriptor: a link at its name is
    replaced, and the file it pointed to keeps its bytes."""
    root = _cache(monkeypatch, tmp_path / "cache")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    calls: List[Path] = []
    build = _build(root / "sim-x", calls, script="echo broken; exit 3")
    buildcache.make_private_dirs(build.directory, build.owner)
    (build.directory / "build.log").symlink_to(victim)
    with pytest.raises(EnvironmentProblem, match="backend failed"):
        buildcache.ensure_built(build)
    log = build.directory / "build.log"
    assert victim.read_text() == "precious"
    assert not log.is_symlink() and "broken" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_a_cache_that_is_itself_a_link_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "cache"
    link.symlink_to(real)
    calls: List[Path] = []
    root = _cache(monkeypatch, link)
    with pytest.raises(EnvironmentProblem, match="is a symbolic link"):
        buildcache.ensure_built(_build(root / "sim-x", calls))
    assert calls == []


def test_too_many_links_on_the_way_is_an_error_not_a_loop(tmp_path, monkeypatch):
    chain = tmp_path / "l0"
    previous = tmp_path / "dir"
    previous.mkdir()
    for number in range(45):
        link = tmp_path / f"l{number}"
        link.symlink_to(previous)
        previous = link
    calls: List[Path] = []
    root = _cache(monkeypatch, previous / "cache")
    with pytest.raises(EnvironmentProblem):
        buildcache.ensure_built(_build(root / "sim-x", calls))
    assert calls == [] and chain.is_symlink()


def test_a_compiler_that_prints_bytes_that_are_not_utf8_still_fails_with_its_log(tmp_path, monkeypatch):
    """A failed compile's output is read as text with undecodable bytes replaced: the error and
    its log, not a UnicodeDecodeError."""
    root = _cache(monkeypatch, tmp_path / "cache")
    calls: List[Path] = []
    build = _build(root / "sim-x", calls, script="printf 'bad \\377\\376 bytes\\n'; exit 1")
    with pytest.raises(EnvironmentProblem, match="backend failed") as info:
        buildcache.ensure_built(build)
    assert "bad \ufffd\ufffd bytes" in info.value.problem
    assert "bad" in (build.directory / "build.log").read_text(encoding="utf-8")
