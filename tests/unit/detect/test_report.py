"""``detect`` end to end on fake site-packages (real metadata, real YAML) and fake CANN trees."""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
from pathlib import Path

import pytest

import ascend_env.commands.detect
from ascend_env import cli
from ascend_env.detect import cann
from ascend_env.detect.report import NO_TORCH_NPU, Report, detect
from ascend_env.hook import compile_guard
from ascend_env.kernels import registry

DATA = Path(__file__).resolve().parents[1] / "data"
DIST_INFO = DATA / "dist-info"
TENSOR_TENSOR = (
    "- func: isin.Tensor_Tensor(Tensor elements, Tensor test_elements, *, bool assume_unique=False, "
    "bool invert=False) -> Tensor\n"
    "- func: isin.Tensor_Tensor_out(Tensor elements, Tensor test_elements, *, bool assume_unique=False, "
    "bool invert=False, Tensor(a!) out) -> Tensor(a!)\n"
)


def install(site: Path, fixture: str, version: str = "", requires: str = "") -> Path:
    """A dist-info copied from the real fixtures, optionally with another Version / Requires-Dist."""
    name, _, real_version = fixture.partition("-")
    version = version or real_version
    target = site / f"{name}-{version}.dist-info"
    shutil.copytree(DIST_INFO / fixture, target)
    meta = target / "METADATA"
    text = meta.read_text().replace(f"Version: {real_version}\n", f"Version: {version}\n")
    if requires:
        text = text.replace("Requires-Dist: torch ==2.1.0\n", f"Requires-Dist: {requires}\n")
    meta.write_text(text)
    (site / name).mkdir(parents=True, exist_ok=True)
    return site / name


def install_torch_npu(site: Path, version: str = "2.1.0.post6", native_isin: bool = False, **kw) -> Path:
    package = install(site, "torch_npu-2.1.0.post6", version, **kw)
    aten = package / "csrc" / "aten"
    aten.mkdir(parents=True)
    shutil.copy(DATA / "npu_native_functions-2.1.0.post6.yaml", aten / "npu_native_functions.yaml")
    codegen = (DATA / "npu_native_functions_by_codegen-2.1.0.post6-excerpt.yaml").read_text()
    if native_isin:
        codegen = codegen.replace("supported:\n", "supported:\n" + TENSOR_TENSOR, 1)
    (aten / "npu_native_functions_by_codegen.yaml").write_text(codegen)
    return package


def make_cann(prefix: Path, version: str = "8.0.RC2", arch: str = "aarch64") -> Path:
    root = prefix / "ascend-toolkit" / version
    (root / f"{arch}-linux").mkdir(parents=True)
    info = f"package_name=Ascend-cann-toolkit\nversion={version}\n"
    (root / f"{arch}-linux" / cann.INFO_FILE).write_text(info)
    (prefix / "ascend-toolkit" / "set_env.sh").write_text("")
    os.symlink(version, prefix / "ascend-toolkit" / "latest")
    return root


@pytest.fixture
def site(tmp_path) -> Path:
    path = tmp_path / "site-packages"
    path.mkdir()
    return path


def run(tmp_path: Path, site: Path, **kw) -> Report:
    kw.setdefault("environ", {})
    kw.setdefault("prefixes", [tmp_path / "Ascend"])
    kw.setdefault("install_info", tmp_path / "etc" / "ascend_install.info")
    kw.setdefault("driver_prefix", tmp_path / "Ascend")
    kw.setdefault("machine", "aarch64")
    kw.setdefault("python_version", (3, 10, 14))
    kw.setdefault("npu_smi", no_npu_smi)
    return detect(paths=[site], **kw)


def no_npu_smi() -> str:
    raise FileNotFoundError("npu-smi")


def npu_smi(name: str):
    return lambda: f"| NPU   Name          | Health |\n| 0     {name}         | OK     |\n"


@pytest.mark.parametrize(
    "soc, kernels, online, advice",
    [
        ("910PremiumA", True, True, "run: python -m ascend_env install"),
        ("310P3", False, True, "install the binary kernels (Ascend-cann-kernels-310p)"),
        ("910B3", True, False, None),
    ],
)
def test_compile_mode_says_when_generation_compiles_online(tmp_path, site, soc, kernels, online, advice):
    install_torch_npu(site)
    root = make_cann(tmp_path / "Ascend")
    if kernels:
        (root / compile_guard.KERNELS_SUBDIR / "ascend910").mkdir(parents=True)
    report = run(tmp_path, site, npu_smi=npu_smi(soc))
    mode = report.to_dict()["compile_mode"]
    assert mode["soc_source"] == "npu-smi info" and mode["soc"] == f"Ascend{soc}"
    assert mode["kernels"]["installed"] is kernels
    assert mode["compiles_online"] is online
    said = [note for note in report.notes if "compile ops online" in note]
    if advice is None:
        assert said == []
    else:
        assert len(said) == 1 and advice in said[0]


def test_compile_mode_unknown_in_a_build_step(tmp_path, site):
    install_torch_npu(site)
    mode = run(tmp_path, site).to_dict()["compile_mode"]
    assert mode["soc"] is None and "npu-smi info did not answer" in mode["soc_source"]
    assert mode["compiles_online"] is None and mode["kernels"]["installed"] is None
    chosen = run(tmp_path, site, environ={"ASCEND_ENV_SOC": "910A"}).to_dict()["compile_mode"]
    assert chosen["soc"] == "Ascend910A" and chosen["soc_source"] == "$ASCEND_ENV_SOC"


def test_old_torch_npu_falls_back(tmp_path, site):
    install_torch_npu(site)
    install(site, "torch-2.13.0+cpu", "2.1.0")
    install(site, "transformers-4.46.3")
    make_cann(tmp_path / "Ascend")
    report = run(tmp_path, site)
    assert report.verdict == "ok", report.to_dict()["compat"]
    assert report.torch_npu.version == "2.1.0.post6" and report.torch.version == "2.1.0"
    assert report.transformers.version == "4.46.3"
    assert report.toolkit.version == "8.0.RC2"
    assert report.isin.falls_back is True and report.isin.install_has_work is True
    assert report.isin.missing == ["isin.Tensor_Tensor", "isin.Tensor_Tensor_out", "isin.Scalar_Tensor"]
    assert "isin.Tensor_Scalar" in report.isin.native
    assert report.problems == []


def test_the_op_lists_are_read_once_and_isin_says_what_the_fixes_say(tmp_path, site, monkeypatch):
    from ascend_env.detect import npu_oplists

    install_torch_npu(site)
    reads = []
    real = npu_oplists.read_torch_npu
    monkeypatch.setattr(
        "ascend_env.detect.report.read_torch_npu", lambda path: reads.append(path) or real(path)
    )
    found = run(tmp_path, site)
    assert len(reads) == 1
    isin = next(fix for fix in found.fixes if fix.op == "isin")
    assert found.isin.falls_back is True and isin.status == "falls_back"
    assert set(isin.falls_back) >= {"isin.Tensor_Tensor", "isin.Tensor_Tensor_out"}


def test_native_isin_means_nothing_to_install(tmp_path, site):
    install_torch_npu(site, native_isin=True)
    install(site, "torch-2.13.0+cpu", "2.1.0+cpu")
    report = run(tmp_path, site)
    assert report.isin.falls_back is False and report.isin.status == "native"
    assert "isin.Tensor_Tensor_out" in report.isin.native


def test_no_torch_npu(tmp_path, site):
    install(site, "torch-2.13.0+cpu")
    report = run(tmp_path, site, python_version=(3, 11, 7))
    assert report.isin.falls_back is False and report.isin.reason == NO_TORCH_NPU
    # The startup hook is what verify requires, torch_npu or not (ascend_env.states).
    assert report.isin.hook_installed is False and report.isin.install_has_work is True
    assert report.isin.install_reason().startswith(f"the startup hook is not installed in {site}")
    assert report.verdict == "unknown"


def test_no_cann_is_a_mismatch_with_a_note(tmp_path, site):
    install_torch_npu(site)
    install(site, "torch-2.13.0+cpu", "2.1.0+cpu")
    report = run(tmp_path, site)
    assert report.verdict == "mismatch"
    assert any("TORCH_DEVICE_BACKEND_AUTOLOAD=0" in note for note in report.notes)


def test_x86_cpu_pin_and_wrong_torch(tmp_path, site):
    install_torch_npu(site, requires="torch (==2.1.0+cpu)")
    install(site, "torch-2.13.0+cpu")
    make_cann(tmp_path / "Ascend", arch="x86_64")
    report = run(tmp_path, site, machine="x86_64")
    checks = {c.name: c.status for c in report.compat.checks}
    assert checks["requires"] == "mismatch" and checks["torch"] == "mismatch"
    assert report.torch_npu.requires_torch == "torch==2.1.0+cpu"


@pytest.mark.parametrize(
    "breakage, reason",
    [
        ("missing", "op lists are missing"),
        ("garbage", "not valid YAML"),
        ("not-a-mapping", "not a torch_npu op list"),
    ],
)
def test_unreadable_yaml_is_unknown(tmp_path, site, breakage, reason):
    package = install_torch_npu(site)
    aten = package / "csrc" / "aten"
    if breakage == "missing":
        shutil.rmtree(aten)
    else:
        content = b"supported: [\x00\xff\xfe" if breakage == "garbage" else b"- just\n- a list\n"
        for name in ("npu_native_functions.yaml", "npu_native_functions_by_codegen.yaml"):
            (aten / name).write_bytes(content)
    report = run(tmp_path, site)
    assert report.isin.falls_back is None and report.isin.status == "unknown"
    assert report.isin.reason.startswith("unknown:") and reason in report.isin.reason
    assert report.isin.install_has_work is None


def test_broken_metadata_and_info_files_become_problems(tmp_path, site):
    broken = site / "torch_npu-2.1.0.post6.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Name: torch_npu\n")
    (tmp_path / "Ascend" / "driver").mkdir(parents=True)
    (tmp_path / "Ascend" / "driver" / "version.info").write_bytes(b"\xff\xfe\x00\x00")
    root = make_cann(tmp_path / "Ascend")
    (root / "aarch64-linux" / cann.INFO_FILE).write_bytes(b"version=\x89PNG\x00\n")
    report = run(tmp_path, site)
    problems = "\n".join(report.problems)
    assert "torch_npu: the metadata at" in problems and "no Version" in problems
    assert "CANN: " in problems and "is not a CANN version" in problems
    assert "driver: " in problems
    json.dumps(report.to_dict())  # serializable


def test_json_schema_is_stable(tmp_path, site):
    install_torch_npu(site)
    document = run(tmp_path, site).to_dict()
    assert document["schema"] == 1
    assert list(document) == [
        "schema",
        "verdict",
        "python",
        "torch",
        "torch_npu",
        "transformers",
        "cann",
        "driver",
        "isin",
        "fixes",
        "compat",
        "compile_mode",
        "problems",
        "notes",
    ]
    assert set(document["compile_mode"]) == {
        "soc",
        "soc_source",
        "kernels",
        "jit_compile_default",
        "compiles_online",
    }
    assert set(document["torch_npu"]) == {
        "installed",
        "version",
        "location",
        "package_dir",
        "requires_torch",
        "shadowed",
        "problems",
    }
    assert set(document["isin"]) == {
        "falls_back",
        "status",
        "reason",
        "native",
        "missing",
        "install_has_work",
        "install_reason",
        "hook_installed",
    }
    assert set(document["compat"]) == {"verdict", "reasons", "checks", "notes", "row"}
    assert set(document["cann"]) == {
        "found",
        "root",
        "origin",
        "version",
        "version_source",
        "searched",
        "problems",
    }
    assert set(document["driver"]) == {"found", "path", "origin", "version", "version_source", "problems"}


# -- the command ---------------------------------------------------------------------------------


@pytest.fixture
def fake_detect(tmp_path, monkeypatch):
    bound = functools.partial(
        detect,
        environ={},
        prefixes=[tmp_path / "Ascend"],
        install_info=tmp_path / "none",
        driver_prefix=tmp_path / "Ascend",
        machine="aarch64",
        python_version=(3, 10, 1),
    )
    monkeypatch.setattr(ascend_env.commands.detect, "detect", bound)


def test_cli_json_and_exit_codes(tmp_path, site, fake_detect, capsys):
    install_torch_npu(site)
    install(site, "torch-2.13.0+cpu", "2.1.0")
    assert cli.main(["detect", "--json", "--path", str(site)]) == 1  # no CANN: mismatch
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"] == "mismatch" and document["isin"]["falls_back"] is True
    make_cann(tmp_path / "Ascend")
    assert cli.main(["detect", "--json", "--path", str(site)]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "ok"


def test_cli_human_output_is_plain_off_a_tty(tmp_path, site, fake_detect, capsys):
    install_torch_npu(site)
    install(site, "torch-2.13.0+cpu", "2.1.0")
    make_cann(tmp_path / "Ascend")
    assert cli.main(["detect", "--path", str(site)]) == 0
    out = capsys.readouterr().out
    assert "\033" not in out
    assert "torch_npu version: 2.1.0.post6" in out and "CANN toolkit: 8.0.RC2" in out
    assert "falls back to the CPU: yes" in out and "Compatibility: ok" in out


def test_cli_bad_path_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["detect", "--path", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_render_does_not_need_a_terminal(tmp_path, site):
    install_torch_npu(site)
    text = ascend_env.commands.detect.render(run(tmp_path, site))
    assert "Compatibility: mismatch" in text and "[XX] cann:" in text
    assert isinstance(io.StringIO(text).read(), str)


def test_install_has_no_work_once_the_startup_hook_is_installed(tmp_path, site):
    from ascend_env.hook import files

    install_torch_npu(site)
    install(site, "transformers-4.46.3")
    assert run(tmp_path, site).isin.install_has_work is True
    for name, data in files.files().items():
        (site / name).write_bytes(data)
    isin = run(tmp_path, site).isin
    assert isin.falls_back is True  # torch_npu's own op table still lacks it
    assert (isin.hook_installed, isin.install_has_work) == (True, False)
    assert isin.install_reason().startswith(f"the startup hook is installed in {site}")


def _statuses(report: Report) -> dict:
    return {fixed.op: (fixed.status, fixed.falls_back) for fixed in report.fixes}


def test_fixes_per_op_for_the_installed_release(tmp_path, site):
    install_torch_npu(site)
    statuses = _statuses(run(tmp_path, site))
    assert list(statuses) == [fix.name for fix in registry.FIXES]  # a row per fix, in registry order
    assert {name: statuses[name] for name in ("isin", "polar")} == {
        "isin": ("falls_back", ["isin.Tensor_Tensor", "isin.Tensor_Tensor_out"]),
        "polar": ("host_copy", []),  # op-plugin b761d58's polar copies to the host
    }
    other = tmp_path / "other-site"
    other.mkdir()
    install_torch_npu(other, version="2.3.1.post2")
    assert _statuses(run(tmp_path, other))["polar"] == ("native", [])


def _install_dist(site, name: str, version: str) -> None:
    dist = site / f"{name}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_torchvisions_ops_count_only_where_torchvision_is_installed(tmp_path, site):
    install_torch_npu(site)
    assert {name: _statuses(run(tmp_path, site))[name][0] for name in ("nms", "roi_align")} == {
        "nms": "not_used",
        "roi_align": "not_used",
    }
    _install_dist(site, "torchvision", "0.16.0")
    statuses = _statuses(run(tmp_path, site))
    assert statuses["nms"] == ("falls_back", ["nms"])  # no torch_npu release has it
    assert statuses["roi_align"] == ("falls_back", ["roi_align", "_roi_align_backward"])
    _install_dist(site, "torchvision_npu", "0.16.0")  # registers them itself
    assert _statuses(run(tmp_path, site))["nms"] == ("left_to", [])


def test_a_release_without_polar_falls_back_on_it(tmp_path, site):
    package = install_torch_npu(site, version="2.2.0", native_isin=True)
    codegen = package / "csrc" / "aten" / "npu_native_functions_by_codegen.yaml"
    polar = (
        "- func: polar(Tensor abs, Tensor angle) -> Tensor\n  impl_ns: op_api\n- func: polar.out("
        "Tensor abs, Tensor angle, *, Tensor(a!) out) -> Tensor(a!)\n  impl_ns: op_api\n"
    )
    assert polar in codegen.read_text()
    codegen.write_text(codegen.read_text().replace(polar, ""))
    report = run(tmp_path, site)
    assert _statuses(report)["polar"] == ("falls_back", ["polar", "polar.out"])
    assert _statuses(report)["isin"] == ("native", [])
    assert "run: python -m ascend_env install" in report.fixes[1].reason


def test_the_startup_hook_makes_them_fixed(tmp_path, site):
    from ascend_env.hook import files

    install_torch_npu(site)
    for name, data in files.files().items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(data)
    report = run(tmp_path, site)
    assert _statuses(report)["isin"] == ("fixed", ["isin.Tensor_Tensor", "isin.Tensor_Tensor_out"])
    assert _statuses(report)["polar"] == ("host_copy", [])
    assert report.to_dict()["fixes"][0] == {
        "op": "isin",
        "status": "fixed",
        "falls_back": ["isin.Tensor_Tensor", "isin.Tensor_Tensor_out"],
        "reason": f"no NPU kernel in torch_npu 2.1.0.post6; the startup hook in {site} registers "
        "ascend-env's",
    }


def test_fixes_without_torch_npu(tmp_path, site):
    assert {f.status for f in run(tmp_path, site).fixes} == {"no_torch_npu"}
