"""A small reader of ELF64 shared objects: the names a library imports, needs and spells out.

Build-time only (the emulated CANN's symbol lists are generated from the torch_npu wheel's own
binaries): the undefined dynamic symbols (``.dynsym``), the ``DT_NEEDED`` entries (``.dynamic``)
and the identifier-like strings of the read-only data (``.rodata``), where the names a library
looks up with ``dlsym`` are kept. Little-endian x86-64 and AArch64 objects only; stdlib only.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Tuple

from ascend_env.exceptions import EnvironmentProblem

__all__ = ["ElfNames", "read_names"]

_SHT_DYNSYM = 11
_DT_NEEDED = 1
_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_.]{3,}")


@dataclass(frozen=True)
class ElfNames:
    """What one shared object imports (``undefined``), links (``needed``) and spells (``strings``)."""

    undefined: FrozenSet[str]
    needed: Tuple[str, ...]
    strings: FrozenSet[str]


def read_names(path: Path) -> ElfNames:
    """The names of the ELF64 little-endian shared object at ``path``."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise EnvironmentProblem(
            f"{path} is not a 64-bit little-endian ELF shared object.",
            "reinstall torch_npu from its wheel for this machine",
        )
    shoff, shentsize, shnum, shstrndx = _header(data)
    sections = [_section(data, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx]
    by_name: Dict[str, Tuple[int, int, int, int, int]] = {}
    for sec in sections:
        by_name[_cstr(data, names[2] + sec[0])] = sec
    undefined: List[str] = []
    for sec in sections:
        if sec[1] != _SHT_DYNSYM:
            continue
        strtab = sections[sec[4]]
        for offset in range(sec[2], sec[2] + sec[3], 24):
            st_name, _info, _other, st_shndx = struct.unpack_from("<IBBH", data, offset)
            if st_shndx == 0 and st_name:
                undefined.append(_cstr(data, strtab[2] + st_name))
    needed: List[str] = []
    dynamic = by_name.get(".dynamic")
    dynstr = by_name.get(".dynstr")
    if dynamic and dynstr:
        for offset in range(dynamic[2], dynamic[2] + dynamic[3], 16):
            tag, value = struct.unpack_from("<qQ", data, offset)
            if tag == _DT_NEEDED:
                needed.append(_cstr(data, dynstr[2] + value))
    rodata = by_name.get(".rodata")
    strings: FrozenSet[str] = frozenset()
    if rodata:
        chunk = data[rodata[2] : rodata[2] + rodata[3]]
        strings = frozenset(m.decode("ascii") for m in _IDENTIFIER.findall(chunk))
    return ElfNames(frozenset(undefined), tuple(needed), strings)


def _header(data: bytes) -> Tuple[int, int, int, int]:
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    return shoff, shentsize, shnum, shstrndx


def _section(data: bytes, offset: int) -> Tuple[int, int, int, int, int]:
    """(name offset, type, file offset, size, link) of the section header at ``offset``."""
    name, kind, _flags, _addr, file_offset, size, link = struct.unpack_from("<IIQQQQI", data, offset)
    return name, kind, file_offset, size, link


def _cstr(data: bytes, offset: int) -> str:
    end = data.index(b"\0", offset)
    return data[offset:end].decode("ascii", "replace")
