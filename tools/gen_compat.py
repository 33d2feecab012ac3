"""Regenerate ascend_env/data/compat.json, the torch_npu <-> torch <-> CANN <-> Python table.

Inputs: the official rows below (transcribed from the Ascend/pytorch version tables, each with its
source), and tools/compat/pypi-wheels.txt, the torch_npu releases with a Linux wheel per platform
and Python, as listed by `pip index versions torch_npu --python-version X --platform P` (refresh it
by hand when torch_npu releases). Run: python tools/gen_compat.py
"""

import json
from pathlib import Path

from packaging.version import Version

HERE = Path(__file__).resolve().parent
avail = {}
for line in open(HERE / "compat" / "pypi-wheels.txt"):
    head, _, vers = line.partition(":")
    plat, py = head.split()
    for v in [x.strip() for x in vers.split(",") if x.strip()]:
        avail.setdefault(v, set()).add(py)
OFF_COMPAT = "Ascend/pytorch COMPATIBILITY.md (TorchNPU version table)"
OFF_README = "Ascend/pytorch README.md (Ascend Auxiliary Software table)"
OFF_README_OLD = "Ascend/pytorch README.md, v2.1.0-6.0.rc1 era (Ascend Auxiliary Software table)"
OFF_README_ZH = "Ascend/pytorch README.zh.md, branch v2.12.0"
FORK = "gitcode forks of Ascend/pytorch, COMPATIBILITY.md (26.1.0 / 26.1.1 rows), not in the upstream file"
official = [
    # torch_npu, cann list, branch, sources
    ("2.1.0", ["7.0.0"], "v2.1.0-5.0.0", [OFF_COMPAT, OFF_README]),
    ("2.1.0.post3", ["8.0.RC1"], "v2.1.0-6.0.rc1", [OFF_README_OLD]),
    ("2.1.0.post4", ["8.0.RC1"], "v2.1.0-6.0.rc1", [OFF_COMPAT, OFF_README]),
    ("2.1.0.post6", ["8.0.RC2"], "v2.1.0-6.0.rc2", [OFF_COMPAT, OFF_README]),
    ("2.1.0.post8", ["8.0.RC3"], "v2.1.0-6.0.rc3", [OFF_COMPAT, OFF_README]),
    ("2.1.0.post10", ["8.0.0"], "v2.1.0-6.0.0", [OFF_COMPAT, OFF_README]),
    ("2.1.0.post12", ["8.1.RC1"], "v2.1.0-7.0.0", [OFF_COMPAT, OFF_README]),
    ("2.1.0.post13", ["8.2.RC1"], "v2.1.0-7.1.0", [OFF_COMPAT, OFF_README]),
    ("2.1.0.post17", ["8.3.RC1"], "v2.1.0-7.2.0", [OFF_COMPAT]),
    ("2.2.0", ["8.0.RC1"], "v2.2.0-6.0.rc1", [OFF_COMPAT, OFF_README]),
    ("2.2.0.post2", ["8.0.RC2"], "v2.2.0-6.0.rc2", [OFF_COMPAT, OFF_README]),
    ("2.3.1", ["8.0.RC2"], "v2.3.1-6.0.rc2", [OFF_COMPAT, OFF_README]),
    ("2.3.1.post2", ["8.0.RC3"], "v2.3.1-6.0.rc3", [OFF_COMPAT, OFF_README]),
    ("2.3.1.post4", ["8.0.0"], "v2.3.1-6.0.0", [OFF_COMPAT, OFF_README]),
    ("2.3.1.post6", ["8.1.RC1"], "v2.3.1-7.0.0", [OFF_COMPAT, OFF_README]),
    ("2.4.0", ["8.0.RC3"], "v2.4.0-6.0.rc3", [OFF_COMPAT, OFF_README]),
    ("2.4.0.post2", ["8.0.0"], "v2.4.0-6.0.0", [OFF_COMPAT, OFF_README]),
    ("2.4.0.post4", ["8.1.RC1"], "v2.4.0-7.0.0", [OFF_COMPAT, OFF_README]),
    ("2.5.1", ["8.1.RC1"], "v2.5.1-7.0.0", [OFF_COMPAT, OFF_README]),
    ("2.5.1.post1", ["8.2.RC1"], "v2.5.1-7.1.0", [OFF_COMPAT, OFF_README]),
    ("2.6.0", ["8.2.RC1"], "v2.6.0-7.1.0", [OFF_COMPAT, OFF_README]),
    ("2.6.0.post3", ["8.3.RC1"], "v2.6.0-7.2.0", [OFF_COMPAT]),
    ("2.6.0.post5", ["8.5.0"], "v2.6.0-7.3.0", [OFF_COMPAT]),
    ("2.7.1", ["8.3.RC1"], "v2.7.1-7.2.0", [OFF_COMPAT]),
    ("2.7.1.post2", ["8.5.0"], "v2.7.1-7.3.0", [OFF_COMPAT]),
    ("2.7.1.post4", ["9.0.0"], "v2.7.1-26.0.0", [OFF_COMPAT]),
    ("2.7.1.post5", ["9.1.0"], "v2.7.1-26.1.0", [OFF_COMPAT]),
    ("2.8.0", ["8.3.RC1"], "v2.8.0-7.2.0", [OFF_COMPAT]),
    ("2.8.0.post2", ["8.5.0"], "v2.8.0-7.3.0", [OFF_COMPAT]),
    ("2.8.0.post4", ["9.0.0"], "v2.8.0-26.0.0", [OFF_COMPAT]),
    ("2.9.0", ["8.5.0"], "v2.9.0-7.3.0", [OFF_COMPAT]),
    ("2.9.0.post2", ["9.0.0"], "v2.9.0-26.0.0", [OFF_COMPAT]),
    ("2.9.0.post3", ["9.1.0"], "v2.9.0-26.1.0", [OFF_COMPAT]),
    ("2.10.0", ["9.0.0", "9.1.0"], "v2.10.0-26.0.0", [OFF_README_ZH, OFF_COMPAT]),
    ("2.11.0", ["9.1.0"], "v2.11.0-26.1.0", [OFF_COMPAT]),
    ("2.12.0", ["9.1.0"], "v2.12.0-26.1.0", [OFF_COMPAT]),
]
fork = {
    "2.10.0.post4": (["9.1.0"], "v2.10.0-26.1.0"),
    "2.9.0.post6": (["9.1.0"], "v2.9.0-26.1.0"),
    "2.7.1.post8": (["9.1.0"], "v2.7.1-26.1.0"),
    "2.12.0.post2": (["9.1.x"], None),
    "2.11.0.post2": (["9.1.x"], None),
    "2.10.0.post6": (["9.1.x"], None),
    "2.9.0.post8": (["9.1.x"], None),
    "2.7.1.post10": (["9.1.x"], None),
}
pyt = {  # official PyTorch <-> Python table (COMPATIBILITY.md)
    "2.1.0": "3.8 3.9 3.10 3.11",
    "2.2.0": "3.8 3.9 3.10",
    "2.3.1": "3.8 3.9 3.10 3.11",
    "2.4.0": "3.8 3.9 3.10 3.11",
    "2.5.1": "3.9 3.10 3.11",
    "2.6.0": "3.9 3.10 3.11",
    "2.7.1": "3.9 3.10 3.11 3.12 3.13",
    "2.8.0": "3.9 3.10 3.11 3.12 3.13",
    "2.9.0": "3.10 3.11 3.12 3.13",
    "2.10.0": "3.10 3.11 3.12 3.13",
    "2.11.0": "3.10 3.11 3.12 3.13 3.14",
    "2.12.0": "3.10 3.11 3.12 3.13 3.14",
    "2.13.0": "3.10 3.11 3.12 3.13 3.14",
}


def pykey(p):
    return tuple(int(x) for x in p.split("."))


def torch_of(v):
    return Version(v).base_version


def x86_pin(v):
    V = Version(v)
    if v in ("2.1.0", "2.2.0"):
        return None
    t = torch_of(v)
    if V < Version("2.12"):
        return f"=={t}+cpu"
    if V < Version("2.13"):
        return f"=={t}"
    return f"=={t}.*"


rows = []
seen = set()


def row(v, cann, branch, status, sources):
    t = torch_of(v)
    if v in avail:
        py = sorted(avail[v], key=pykey)
        pysrc = "pypi"
    else:
        py = pyt[t].split()
        pysrc = "official"
    r = {
        "torch_npu": v,
        "torch": t,
        "cann": cann,
        "python": py,
        "python_from": pysrc,
        "branch": branch,
        "status": status,
        "sources": sources,
        "on_pypi": v in avail,
        "x86_64_requires_torch": x86_pin(v),
    }
    rows.append(r)
    seen.add(v)


for v, c, b, s in official:
    row(v, c, b, "official", s)
for v in sorted(avail, key=Version):
    if v in seen:
        continue
    if Version(v) < Version("2.1"):
        continue
    if v in fork:
        c, b = fork[v]
        row(v, c, b, "inferred", [FORK, "PyPI metadata"])
    else:
        row(v, None, None, "inferred", ["PyPI metadata"])
rows.sort(key=lambda r: Version(r["torch_npu"]))
doc = {
    "schema": 1,
    "about": "torch_npu <-> torch <-> CANN <-> Python. Rows marked 'official' come from the Ascend/pytorch "
    "version tables; 'inferred' rows are torch_npu releases on PyPI that those tables do not list: "
    "their torch pin and Python versions come from the wheels' metadata and tags, and their CANN "
    "(when not null) from the sources named in the row. python_from says where a row's Python list "
    "comes from: 'pypi' (the Python versions with a wheel for Linux x86_64 or aarch64) or 'official' "
    "(the PyTorch-Python table, for versions not on PyPI). A CANN entry 'X.Y.x' means any release "
    "of the X.Y line.",
    "x86_64_requires_torch": "What the Linux x86_64 wheels require: torch==X+cpu up to 2.11.x (2.1.0 and "
    "2.2.0 declare no torch requirement), ==X for 2.12.x, ==X.* from 2.13.0. aarch64 wheels require "
    "torch==X (==X.* from 2.13.0).",
    "checked": "PyPI simple index and wheel metadata (PEP 658) of torch_npu, and the Ascend/pytorch tables",
    "python_by_torch": {k: v.split() for k, v in pyt.items()},
    "rows": rows,
}
json.dump(doc, open(HERE.parent / "ascend_env" / "data" / "compat.json", "w"), indent=1)
print(len(rows), sum(r["status"] == "official" for r in rows))
for r in rows:
    print(r["torch_npu"], r["status"], r["cann"], r["python"], r["python_from"], r["x86_64_requires_torch"])
