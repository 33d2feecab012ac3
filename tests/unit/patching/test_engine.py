"""install / restore / status on fake site-packages trees with real dist-info and patches."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
from fake_site import (
    STOP_PATH,
    STOPPING,
    STOPPING_PATCHED,
    UTILS,
    UTILS_PATCHED,
    UTILS_PATH,
    make_patches,
    make_site,
    run_cli,
    sha,
    snapshot,
)

from ascend_env.exceptions import EnvironmentProblem, HunkMismatch, PatchError
from ascend_env.patching import engine
from ascend_env.patching.records import find_distribution
from ascend_env.patching.state import drift, read_state
from ascend_env.patching.store import state_dir


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site(tmp_path)


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    return make_patches(tmp_path)


def install(site_packages: Path, directory: Path, **kwargs) -> engine.InstallReport:
    kwargs.setdefault("patches", "always")
    return engine.install(site_packages, directory=directory, **kwargs)


def assert_record_true(site: Path) -> None:
    """Every RECORD row with a hash matches the file on disk."""
    dist = find_distribution(site, "transformers")
    assert dist is not None
    for entry in dist.record.values():
        if entry.hash:
            assert entry.matches((site / entry.path).read_bytes()), entry.path


def test_install_patches_files_rewrites_record_and_records_state(site, patches):
    report = install(site, patches)
    assert report.result == "applied"
    assert (site / STOP_PATH).read_text() == STOPPING_PATCHED
    assert (site / UTILS_PATH).read_text() == UTILS_PATCHED
    assert_record_true(site)
    state = read_state(site)
    assert state is not None and state.version == "4.46.3"
    by_path = {e.path: e for e in state.entries}
    assert by_path[STOP_PATH].before == sha(STOPPING.encode())
    assert by_path[STOP_PATH].after == sha(STOPPING_PATCHED.encode())
    assert by_path[STOP_PATH].patch == "stopping-criteria-eos-v1"
    assert by_path["transformers-4.46.3.dist-info/RECORD"].kind == "record"
    assert drift(site) == []
    # Nothing left next to the targets, nothing in flight.
    leftovers = [p for p in snapshot(site) if p.endswith((".orig", ".rej")) or "/.write-" in p or "tmp" in p]
    assert leftovers == []
    assert not (state_dir(site) / "journal.json").exists()


def test_second_install_is_a_no_op(site, patches):
    install(site, patches)
    before = snapshot(site)
    report = install(site, patches)
    assert report.result == "already applied"
    assert report.changed == []
    assert snapshot(site) == before


def test_restore_is_byte_identical_and_removes_state(site, patches):
    original = snapshot(site)
    install(site, patches)
    report = engine.restore(site)
    assert report.result == "restored"
    assert snapshot(site) == original
    assert not state_dir(site).exists()
    assert engine.restore(site).result == "nothing to restore"


def test_dry_run_writes_nothing(site, patches):
    original = snapshot(site)
    report = install(site, patches, dry_run=True)
    assert report.result == "would apply"
    assert sorted(report.changed) == sorted([STOP_PATH, UTILS_PATH, "transformers-4.46.3.dist-info/RECORD"])
    assert snapshot(site) == original
    install(site, patches)
    applied = snapshot(site)
    assert engine.restore(site, dry_run=True).result == "would restore"
    assert snapshot(site) == applied


def test_crlf_target_stays_crlf(tmp_path):
    site = make_site(tmp_path, crlf=True)
    patches = make_patches(tmp_path, crlf_versions=("4.46.3",))
    install(site, patches)
    assert (site / STOP_PATH).read_bytes() == STOPPING_PATCHED.replace("\n", "\r\n").encode()
    assert_record_true(site)


def test_conflict_names_file_hunk_and_lines_and_changes_nothing(site, patches):
    path = site / STOP_PATH
    path.write_text(STOPPING.replace("return torch.isin(", "return torch.isin_local("))
    original = snapshot(site)
    with pytest.raises(HunkMismatch) as info:
        install(site, patches)
    message = str(info.value)
    assert STOP_PATH in message and "hunk 1 of 1" in message
    assert "torch.isin(input_ids" in message and "torch.isin_local(input_ids" in message
    assert snapshot(site) == original


def test_conflict_via_cli_exits_2_with_json(site, patches):
    (site / UTILS_PATH).write_text(UTILS.replace("test_elements)", "other)"))
    original = snapshot(site)
    result = run_cli(
        "install", "--json", "--patches", "always", "--target", str(site), "--patches-dir", str(patches)
    )
    assert result.returncode == 2
    payload = json.loads(result.stdout)
    assert payload["ok"] is False and payload["path"] == UTILS_PATH and payload["hunk"] == 1
    assert snapshot(site) == original


def test_patched_file_without_state_counts_as_applied(site, patches):
    (site / STOP_PATH).write_text(STOPPING_PATCHED)  # e.g. a +ascend wheel
    report = install(site, patches, dry_run=True)
    statuses = {f.path: f.status for f in report.files}
    assert statuses == {STOP_PATH: "applied", UTILS_PATH: "clean"}
    assert report.changed == [UTILS_PATH, "transformers-4.46.3.dist-info/RECORD"]


def test_reverse_probe_recognises_patched_text_in_a_changed_file(site, patches):
    (site / STOP_PATH).write_text("# a local comment\n" + STOPPING_PATCHED)
    files = engine.inspect_site(site, None, patches).files
    stop = next(f for f in files if f.path == STOP_PATH)
    assert stop.status == "applied" and "differs from the wheel" in stop.detail


def test_file_that_differs_but_would_patch_is_a_conflict(site, patches):
    (site / STOP_PATH).write_text("# a local comment\n" + STOPPING)
    with pytest.raises(EnvironmentProblem, match="differs from transformers 4.46.3"):
        install(site, patches)


@pytest.mark.parametrize("version", ["4.45.99", "4.46.3.dev0", "4.46.3+local"])
def test_unknown_release_is_refused(tmp_path, patches, version):
    site = make_site(tmp_path, version=version)
    original = snapshot(site)
    with pytest.raises(EnvironmentProblem, match="not a release"):
        install(site, patches)
    assert snapshot(site) == original
    result = run_cli("install", "--patches", "always", "--target", str(site), "--patches-dir", str(patches))
    assert result.returncode == 2 and "fix:" in result.stderr
    assert snapshot(site) == original


@pytest.mark.parametrize("version", ["4.39.3", "5.1.0", "5.2.0.dev0"])
def test_releases_outside_the_range_have_nothing_to_do(tmp_path, patches, version):
    site = make_site(tmp_path, version=version)
    original = snapshot(site)
    report = install(site, patches)
    assert report.result == "nothing to do"
    assert "needs no patch" in report.reason
    assert snapshot(site) == original
    assert engine.status(site, directory=patches).code == 0


def test_target_outside_record_is_refused(site, tmp_path):
    patches = make_patches(tmp_path)
    manifest = json.loads((patches / "manifest.json").read_text())
    # Point a patch at a real file of site-packages that transformers' RECORD does not list.
    (site / "sitecustomize.py").write_text(STOPPING)
    text = (patches / "transformers/stopping-criteria-eos-v1.patch").read_text()
    (patches / "transformers/stopping-criteria-eos-v1.patch").write_text(
        text.replace(STOP_PATH, "sitecustomize.py")
    )
    manifest["patches"]["stopping-criteria-eos-v1"]["target"] = "sitecustomize.py"
    release = manifest["releases"]["4.46.3"]
    release["sitecustomize.py"] = release.pop(STOP_PATH)
    (patches / "manifest.json").write_text(json.dumps(manifest))
    original = snapshot(site)
    with pytest.raises(PatchError, match="not in transformers-4.46.3.dist-info/RECORD"):
        install(site, patches)
    assert snapshot(site) == original


def test_symlinked_target_is_refused(site, patches, tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text(STOPPING)
    (site / STOP_PATH).unlink()
    os.symlink(outside, site / STOP_PATH)
    with pytest.raises(PatchError):
        install(site, patches)
    assert outside.read_text() == STOPPING


def test_patch_file_disagreeing_with_manifest_is_refused(site, patches):
    manifest = json.loads((patches / "manifest.json").read_text())
    manifest["patches"]["isin-mps-friendly-v1"]["path"] = "transformers/stopping-criteria-eos-v1.patch"
    (patches / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PatchError, match="the manifest says"):
        install(site, patches)


def test_manifest_after_hash_is_checked(site, patches):
    manifest = json.loads((patches / "manifest.json").read_text())
    manifest["releases"]["4.46.3"][STOP_PATH]["after"] = "0" * 64
    (patches / "manifest.json").write_text(json.dumps(manifest))
    original = snapshot(site)
    with pytest.raises(PatchError, match="sha256 differs"):
        install(site, patches)
    assert snapshot(site) == original


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_read_only_site_packages_is_refused(site, patches):
    original = snapshot(site)
    modes = {}
    for path in [site, *site.rglob("*")]:
        if path.is_dir():
            modes[path] = path.stat().st_mode
            path.chmod(0o555)
    try:
        result = run_cli(
            "install", "--patches", "always", "--target", str(site), "--patches-dir", str(patches)
        )
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    assert result.returncode == 2 and "read-only" in result.stderr
    assert snapshot(site) == original


def test_unwritable_state_directory_is_refused_before_any_write(site, patches, monkeypatch):
    original = snapshot(site)

    def deny(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", deny)
    with pytest.raises(EnvironmentProblem, match="read-only") as info:
        install(site, patches)
    assert info.value.exit_code == 2
    monkeypatch.undo()
    assert snapshot(site) == original


def test_auto_without_torch_npu_does_nothing_and_says_so(site, patches):
    original = snapshot(site)
    report = install(site, patches, patches="auto")
    assert report.result == "nothing to do"
    assert "torch_npu is not installed" in report.reason
    assert snapshot(site) == original


def test_auto_patches_when_torch_npu_lacks_isin(tmp_path, patches):
    site = make_site(tmp_path, torch_npu_ops=["abs", "add.Tensor"])
    assert install(site, patches, patches="auto").result == "applied"
    assert (site / STOP_PATH).read_text() == STOPPING_PATCHED


def test_auto_skips_when_torch_npu_has_isin(tmp_path, patches):
    site = make_site(tmp_path, torch_npu_ops=["abs", "isin.Tensor_Tensor", "isin.Tensor_Tensor_out"])
    report = install(site, patches, patches="auto")
    assert report.result == "nothing to do" and "native NPU isin" in report.reason


def test_never_patches_nothing(site, patches):
    assert install(site, patches, patches="never").result == "nothing to do"
    assert (site / STOP_PATH).read_text() == STOPPING


def test_drift_after_reinstall_is_reported_and_reinstall_reapplies(site, patches):
    install(site, patches)
    assert engine.status(site, directory=patches).verdict.status == "applied"
    # What pip install --force-reinstall does: original bytes and RECORD come back.
    record = site / "transformers-4.46.3.dist-info/RECORD"
    (site / STOP_PATH).write_text(STOPPING)
    assert drift(site) == [f"{STOP_PATH} changed since ascend-env install"]
    report = engine.status(site, directory=patches)
    assert (report.verdict.status, report.code) == ("drifted", 1)
    assert "python -m ascend_env install" in report.verdict.run
    install(site, patches)
    assert drift(site) == [] and (site / STOP_PATH).read_text() == STOPPING_PATCHED
    assert_record_true(site)
    assert record.exists()


def test_restore_after_full_reinstall_keeps_pips_files(site, patches):
    original = snapshot(site)
    install(site, patches)
    for path, data in original.items():  # a force-reinstall puts back every file
        (site / path).write_bytes(data)
    engine.restore(site)
    assert snapshot(site) == original


def test_restore_refuses_to_overwrite_a_locally_edited_file(site, patches):
    install(site, patches)
    (site / UTILS_PATH).write_text("edited by hand\n")
    edited = snapshot(site)
    with pytest.raises(EnvironmentProblem, match="changed since install"):
        engine.restore(site)
    assert snapshot(site) == edited


def test_status_states(tmp_path, patches):
    site = make_site(tmp_path, torch_npu_ops=["abs"])
    report = engine.status(site, directory=patches)
    assert (report.verdict.status, report.code) == ("not applied", 1)
    assert report.verdict.run == "python -m ascend_env install"
    (site / STOP_PATH).write_text(STOPPING_PATCHED)
    report = engine.status(site, directory=patches)
    assert (report.verdict.status, report.code) == ("partly applied", 1)
    (site / STOP_PATH).write_text(STOPPING)
    install(site, patches)
    assert engine.status(site, directory=patches).code == 0
    # The engine alone installs no startup hook: status (ascend_env.states) says the patches are
    # applied, and exits 1 with what to run, as verify fails there.
    result = run_cli("status", "--target", str(site), "--patches-dir", str(patches))
    assert result.returncode == 1 and result.stdout.startswith("applied:")
    assert "  run: python -m ascend_env install\n" in result.stdout
    assert result.stdout.endswith("status: applied: the startup hook is not installed\n")


def test_status_without_torch_npu_and_unpatched_is_fine(site, patches):
    report = engine.status(site, directory=patches)
    assert (report.verdict.status, report.code) == ("not applied", 0)


def test_extra_files_join_the_transaction(site, patches):
    original = snapshot(site)
    extra = {"demo_hook.pth": b"import demo\n"}
    report = install(site, patches, extra_files=extra)
    assert "demo_hook.pth" in report.changed
    assert (site / "demo_hook.pth").read_bytes() == b"import demo\n"
    assert install(site, patches, extra_files=extra).result == "already applied"
    (site / "demo_hook.pth").unlink()
    assert drift(site) == ["demo_hook.pth is missing"]
    install(site, patches, extra_files=extra)
    engine.restore(site)
    assert snapshot(site) == original


def test_cli_install_json_and_text(site, patches):
    args = ["--target", str(site), "--patches-dir", str(patches)]
    result = run_cli("install", "--dry-run", "--patches", "always", "--json", *args)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"] == "would apply"
    result = run_cli("install", "--patches", "always", *args)
    assert result.returncode == 0 and result.stdout.startswith("applied:") and "\033" not in result.stdout
    result = run_cli("install", "--patches", "always", *args)
    assert result.stdout.startswith("already applied:")
    result = run_cli("restore", "--target", str(site))
    assert result.returncode == 0 and result.stdout.startswith("restored:")


def test_patch_wheel_build_counts_as_its_release_and_is_already_applied(tmp_path, patches):
    site = make_site(tmp_path, version="4.46.3+ascend.1")
    (site / STOP_PATH).write_text(STOPPING_PATCHED)
    (site / UTILS_PATH).write_text(UTILS_PATCHED)
    before = snapshot(site)
    report = install(site, patches)
    assert report.result == "already applied"
    assert snapshot(site) == before
    report = engine.status(site, directory=patches)
    assert (report.verdict.status, report.code) == ("applied", 0)


def test_auto_skips_when_only_the_out_form_is_native(tmp_path, patches):
    # The functional overload's composite kernel calls the native out= form: no fallback.
    site = make_site(tmp_path, torch_npu_ops=["abs", "isin.Tensor_Tensor_out"])
    assert install(site, patches, patches="auto").result == "nothing to do"


def test_auto_patches_when_the_out_form_is_missing(tmp_path, patches):
    site = make_site(tmp_path, torch_npu_ops=["abs", "isin.Tensor_Tensor"])
    assert install(site, patches, patches="auto").result == "applied"


def test_a_plan_that_fails_once_outside_the_lock_is_read_again(site, patches, monkeypatch):
    # A finishing restore removes .ascend-env while a racing run reads it: that run reads again.
    install(site, patches)
    real, calls = engine.plan_restore, []

    def flaky(site_packages):
        calls.append(1)
        if len(calls) == 1:
            raise EnvironmentProblem("the recorded bytes are missing or damaged.", "retry")
        return real(site_packages)

    monkeypatch.setattr(engine, "plan_restore", flaky)
    assert engine.restore(site).result == "restored"
    assert (site / STOP_PATH).read_text() == STOPPING


def test_a_plan_that_fails_twice_is_refused(site, patches, monkeypatch):
    install(site, patches)
    before = snapshot(site)

    def broken(site_packages):
        raise EnvironmentProblem("the recorded bytes are missing or damaged.", "reinstall")

    monkeypatch.setattr(engine, "plan_restore", broken)
    with pytest.raises(EnvironmentProblem, match="missing or damaged"):
        engine.restore(site)
    assert snapshot(site) == before


def _runs_isin(site: Path) -> bool:
    """Whether the code that a fresh interpreter runs for the stopping-criteria target calls isin."""
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "from transformers.generation import stopping_criteria as m\n"
        "print('isin' in m.eos.__code__.co_names)\n"
    )
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip() == "True"


def _compile_unchecked(site: Path) -> None:
    """Bytecode as images often ship it: never checked against its source."""
    for relative in (STOP_PATH, UTILS_PATH):
        source = str(site / relative)
        for level in ("", 1):  # python and python -O
            cfile = importlib.util.cache_from_source(source, optimization=level)
            py_compile.compile(
                source,
                cfile=cfile,
                optimize=-1 if level == "" else level,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )


def test_stale_unchecked_bytecode_is_drift(site, patches):
    """Bytecode compiled unchecked from the original text after install (an image step that
    restored it, say): the patched source never runs, and status must not say "applied"."""
    install(site, patches)
    original = site / STOP_PATH
    patched = original.read_bytes()
    original.write_bytes(STOPPING.encode())
    _compile_unchecked(site)
    original.write_bytes(patched)
    assert _runs_isin(site)
    lines = drift(site)
    prefix = f"{STOP_PATH}: its bytecode stopping_criteria."
    assert len(lines) == 2 and all(line.startswith(prefix) for line in lines)
    result = run_cli("status", "--json", "--target", str(site), "--patches-dir", str(patches))
    assert result.returncode == 1 and json.loads(result.stdout)["status"] == "drifted"
    report = install(site, patches)  # what status advises: it drops that bytecode
    assert report.bytecode_dropped == [STOP_PATH] and drift(site) == [] and not _runs_isin(site)


def test_install_and_restore_drop_bytecode_that_is_never_checked(site, patches):
    """An unchecked-hash .pyc of a patched file would keep the old code running after install
    (and the patched code after restore): both drop the .pyc files of every file they change."""
    _compile_unchecked(site)
    assert _runs_isin(site)
    install(site, patches)
    assert not _runs_isin(site)  # the patched source runs
    assert drift(site) == []
    _compile_unchecked(site)  # the image rebuilt its bytecode from the patched sources
    assert not _runs_isin(site) and drift(site) == []
    assert engine.restore(site).result == "restored"
    assert _runs_isin(site)
