"""The emulated CANN's symbol lists: the ELF reader, the lists drawn from a torch_npu-like package,
and the generated stubs. Built with the system compiler from small C sources (skipped without one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ascend_env.cann import elf, symbols
from ascend_env.exceptions import EnvironmentProblem

COMPILER = shutil.which("cc") or shutil.which("gcc")
needs_compiler = pytest.mark.skipif(COMPILER is None, reason="needs a C compiler to build a sample library")

# A library shaped as torch_npu's are: it links a CANN library and imports from it, and spells the
# names it looks up with dlsym (and the library it opens) in its read-only data.
SOURCE = r"""
#include <stddef.h>
extern int aclrtSetDevice(int);
extern int HcclCommDestroy(void*);
extern int printf(const char*, ...);
const char* const looked_up[] = {"aclnnAddGetWorkspaceSize", "aclnnAdd", "libopapi.so", "aclrtGetSocName",
                                 "acl_not_an_entry", "PTAGetExecCache"};
int entry(void) { printf("%s", looked_up[0]); return aclrtSetDevice(0) + HcclCommDestroy(NULL); }
"""


def build_package(tmp_path: Path) -> Path:
    package = tmp_path / "torch_npu"
    (package / "lib").mkdir(parents=True)
    (tmp_path / "hccl.c").write_text("int HcclCommDestroy(void* c) { return 0; }\n", encoding="utf-8")
    (tmp_path / "acl.c").write_text("int aclrtSetDevice(int d) { return 0; }\n", encoding="utf-8")
    (tmp_path / "npu.c").write_text(SOURCE, encoding="utf-8")
    for name in ("hccl", "acl"):
        cann = tmp_path / "cann" / f"lib{'hccl' if name == 'hccl' else 'ascendcl'}.so"
        cann.parent.mkdir(exist_ok=True)
        subprocess.run(
            [str(COMPILER), "-shared", "-fPIC", str(tmp_path / f"{name}.c"), "-o", str(cann)]
            + [f"-Wl,-soname,{cann.name}"],
            check=True,
        )
    subprocess.run(
        [
            str(COMPILER),
            "-shared",
            "-fPIC",
            str(tmp_path / "npu.c"),
            "-o",
            str(package / "lib" / "libtorch_npu.so"),
        ]
        + [f"-L{tmp_path / 'cann'}", "-lhccl", "-lascendcl"],
        check=True,
    )
    include = package / "include" / "third_party" / "acl" / "inc" / "acl"
    include.mkdir(parents=True)
    (include / "acl_rt.h").write_text(
        "ACL_FUNC_VISIBILITY const char *aclrtGetSocName();\n"
        "ACL_FUNC_VISIBILITY aclError aclrtSetDevice(int32_t deviceId);\n",
        encoding="utf-8",
    )
    return package


@needs_compiler
def test_the_elf_reader_sees_imports_needed_libraries_and_strings(tmp_path: Path) -> None:
    package = build_package(tmp_path)
    names = elf.read_names(package / "lib" / "libtorch_npu.so")
    assert {"aclrtSetDevice", "HcclCommDestroy", "printf"} <= names.undefined
    assert "entry" not in names.undefined  # defined here
    assert names.needed[:2] == ("libhccl.so", "libascendcl.so")
    assert {"aclnnAddGetWorkspaceSize", "libopapi.so", "PTAGetExecCache"} <= names.strings


@needs_compiler
def test_the_lists_hold_cann_names_only(tmp_path: Path) -> None:
    listed = symbols.wheel_symbols(build_package(tmp_path))
    assert listed.libraries == ("libascendcl.so", "libhccl.so", "libopapi.so")
    assert listed.entry_points == (
        "HcclCommDestroy",
        "aclnnAdd",
        "aclnnAddGetWorkspaceSize",
        "aclrtGetSocName",
        "aclrtSetDevice",
    )
    assert listed.pointer_returning == frozenset({"aclrtGetSocName"})


@needs_compiler
def test_every_entry_point_gets_a_stub_that_fails_and_returns_its_kind(tmp_path: Path) -> None:
    source = symbols.stub_source(symbols.wheel_symbols(build_package(tmp_path)))
    assert 'ASCEND_ENV_STUB(ascend_env_stub_0, "HcclCommDestroy", 5, r)' in source  # HCCL_E_NOT_SUPPORT
    assert '"aclnnAddGetWorkspaceSize", 500000, r)' in source  # ACL_ERROR_INTERNAL_ERROR
    assert '"aclrtGetSocName", 500000, 0)' in source  # a pointer: NULL
    assert "PTAGetExecCache" not in source and "acl_not_an_entry" not in source


def test_the_digest_follows_the_lists(tmp_path: Path) -> None:
    one = symbols.WheelSymbols(tmp_path, ("libhccl.so",), ("aclInit",), frozenset())
    assert (
        one.digest()
        == symbols.WheelSymbols(tmp_path / "x", ("libhccl.so",), ("aclInit",), frozenset()).digest()
    )
    assert (
        one.digest()
        != symbols.WheelSymbols(tmp_path, ("libhccl.so",), ("aclInit", "aclnnAdd"), frozenset()).digest()
    )


def test_a_package_without_binaries_is_an_environment_problem(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem, match="holds no torch_npu binaries"):
        symbols.wheel_symbols(tmp_path)


def test_a_file_that_is_not_elf_is_an_environment_problem(tmp_path: Path) -> None:
    bogus = tmp_path / "libx.so"
    bogus.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(EnvironmentProblem, match="not a 64-bit little-endian ELF"):
        elf.read_names(bogus)
