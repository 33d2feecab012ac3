"""``python model_probe.py RELEASE SOC PROBE``: run PROBE on the simulated NPU (RELEASE's op table)
under the dispatch-path model with SoC SOC, and print per decoding step the model's would-be
online compiles by op and its calls by path, as one JSON document. Used by test_paths_binary.py."""

from __future__ import annotations

import json
import os
import runpy
import sys

release, soc, probe = sys.argv[1:4]
os.environ["ASCEND_ENV_SOC"] = soc
from ascend_env import sim  # noqa: E402

sim.enable(release)
sim.add_torch_npu_to_path()
from ascend_env.sim import dispatch_model  # noqa: E402

dispatch_model.start()
runpy.run_path(probe, run_name="__main__")
found = dispatch_model.report()
assert found is not None
steps = found["generate"][0]["steps"]
print(json.dumps([{"by_op": step["would_compile_by_op"], "paths": step["paths"]} for step in steps]))
