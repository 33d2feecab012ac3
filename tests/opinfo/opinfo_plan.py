"""Which sweeps the OpInfo suite runs on a torch: CI's sample, or (``ASCEND_ENV_OPINFO=all``) all.

A sweep is one process: one op table, one dtype, every OpInfo or a shard of them (every N-th).

CI's sample, on the torch a release line pins (2.1.0, 2.2.0, 2.3.1): the release the product's
users run on it (2.1.0.post6, 2.2.0, 2.3.1) in full, float32 and complex64; every other release
of the line float32, a shard each, so that the line's shards cover every OpInfo once. On any other
torch (CI's 2.13.0): the newest release and 2.1.0.post6 (the release ``audit`` users check most)
in full, float32 and complex64, and the newest release of every other line from 2.4 float32, a
quarter of the OpInfos each (each OpInfo on two or three lines).

``ASCEND_ENV_OPINFO=all``: every release, float32 and complex64, every OpInfo
(``ASCEND_ENV_OPINFO_SAMPLES`` sets the samples per OpInfo, 3 by default).
"""

from __future__ import annotations

import os
from typing import List, NamedTuple

from ascend_env.sim import optables

# The release of each old line that the product's users run (and whose isin it fixes).
USERS_RELEASE = {"2.1": "2.1.0.post6", "2.2": "2.2.0", "2.3": "2.3.1"}
DTYPES = ("float32", "complex64")
SHARDS_PER_LINE = 4


class Sweep(NamedTuple):
    table: str
    dtype: str
    shard: int = 0
    shards: int = 1

    def __str__(self) -> str:
        part = "" if self.shards == 1 else f"-shard{self.shard}of{self.shards}"
        return f"{self.table}-{self.dtype}{part}"


def line(version: str) -> str:
    """``2.1`` for ``2.1.0.post6`` or ``2.1.0+cpu``."""
    return ".".join(version.split("+")[0].split(".")[:2])


def samples() -> int:
    return int(os.environ.get("ASCEND_ENV_OPINFO_SAMPLES", "3"))


def sweeps(torch_version: str) -> List[Sweep]:
    """The sweeps for ``torch_version`` (``torch.__version__``)."""
    releases = optables.releases()
    if os.environ.get("ASCEND_ENV_OPINFO") == "all":
        return [Sweep(table, dtype) for table in releases for dtype in DTYPES]
    own = line(torch_version)
    if own in USERS_RELEASE:
        home = USERS_RELEASE[own]
        others = [table for table in releases if line(table) == own and table != home]
        return [Sweep(home, dtype) for dtype in DTYPES] + [
            Sweep(table, "float32", index, len(others)) for index, table in enumerate(others)
        ]
    full = [optables.newest(), USERS_RELEASE["2.1"]]
    newest_of_line = {}
    for table in releases:
        newest_of_line[line(table)] = table
    others = [
        table for name, table in newest_of_line.items() if name not in USERS_RELEASE and table not in full
    ]
    return [Sweep(table, dtype) for table in full for dtype in DTYPES] + [
        Sweep(table, "float32", index % SHARDS_PER_LINE, SHARDS_PER_LINE)
        for index, table in enumerate(others)
    ]
