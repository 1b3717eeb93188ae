"""What a process imports at start: no SciPy, dp-accounting, torch or transformers.

``dpsyn serve`` (``app.main``), ``dpsyn worker`` (``workers.celery_app``) and every client
command (``app.cli``) import the privacy code, which prices events with dp-accounting and
SciPy. Imported at module level, those two cost each process start about 1.2 s of CPU (the
API's imports took 3.4 s instead of 2.1 s), paid by every container start, every ``dpsyn``
command a user types and every subprocess a test starts, although most of these processes
never price an event. They are imported where an event is priced; the model libraries only
where a model loads. A fresh interpreter here imports each entry point and reports what it
loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Libraries an entry point must not load before it does work that needs them.
HEAVY = ("scipy", "dp_accounting", "torch", "transformers", "llama_cpp", "vllm")
ENTRY_POINTS = ("app.cli", "workers.celery_app", "app.main")
# One interpreter for all (each start costs a second of CPU): after each entry point, the heavy
# libraries loaded so far, so that the first entry point to load one is the one named. Then
# the functions whose imports moved price events, loading SciPy on the way.
PROBE = """
import importlib, json, sys
heavy = set(sys.argv[1].split(","))
loaded = {}
for module in sys.argv[2:]:
    importlib.import_module(module)
    loaded[module] = sorted({m.split(".")[0] for m in sys.modules} & heavy)
import numpy as np
from app.privacy.accounting import PaperRdpAccountant, TightPldAccountant
from app.privacy.events import GaussianEvent
from app.privacy.planner import hit_probabilities
from app.privacy.unit import gaussian_delta, posterior_mean
event = GaussianEvent(2.0)
hit = hit_probabilities(np.eye(2), np.array([0, 1]), 1.0, np.zeros((3, 2, 2)))
priced = [
    TightPldAccountant().epsilon(event, 1e-5) > 0,
    PaperRdpAccountant().epsilon(event, 1e-5) > 0,
    0 < gaussian_delta(2.0, 1.0) < 1,
    posterior_mean(-20.0, 83.0) > 1,
    bool(np.all((hit > 0.5) & (hit < 1))),
    "scipy" in sys.modules,
]
print(json.dumps({"loaded": loaded, "priced": priced}))
"""


def test_the_entry_points_import_no_heavy_library_and_the_privacy_code_still_prices() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(HEAVY), *ENTRY_POINTS],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["loaded"] == {module: [] for module in ENTRY_POINTS}
    assert report["priced"] == [True] * 6
