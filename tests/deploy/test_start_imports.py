"""What a process imports at start: no SciPy, dp-accounting, torch or transformers.

``dpsyn serve`` (``app.main``), ``dpsyn worker`` (``workers.celery_app``) and every client
command (``app.cli``) import the privacy code, which prices events with dp-accounting and
SciPy. Imported at module level, those two cost each process start about 1.3 s of CPU (the
API's start went from 1.7 s to 3.5 s), paid by every container start, every ``dpsyn``
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

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Libraries an entry point must not load before it does work that needs them.
HEAVY = ("scipy", "dp_accounting", "torch", "transformers", "llama_cpp", "vllm")
PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
heavy = sys.argv[2].split(",")
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(heavy))))
"""


@pytest.mark.parametrize("module", ["app.main", "app.cli", "workers.celery_app"])
def test_an_entry_point_imports_no_heavy_library(module: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module, ",".join(HEAVY)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_privacy_code_still_prices_an_event_after_a_lazy_import() -> None:
    """The imports moved into the functions run: a fresh interpreter prices a sampled
    Gaussian with both accountants and the planner's hit rate, loading SciPy on the way."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from app.privacy.accounting import PaperRdpAccountant, TightPldAccountant\n"
        "from app.privacy.events import GaussianEvent\n"
        "from app.privacy.planner import hit_probabilities\n"
        "from app.privacy.unit import gaussian_delta, posterior_mean\n"
        "assert 'scipy' not in sys.modules\n"
        "event = GaussianEvent(2.0)\n"
        "print(TightPldAccountant().epsilon(event, 1e-5) > 0)\n"
        "print(PaperRdpAccountant().epsilon(event, 1e-5) > 0)\n"
        "print(0 < gaussian_delta(2.0, 1.0) < 1, posterior_mean(-20.0, 83.0) > 1)\n"
        "hit = hit_probabilities(np.eye(2), np.array([0, 1]), 1.0, np.zeros((3, 2, 2)))\n"
        "print(bool(np.all((hit > 0.5) & (hit < 1))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True"] * 5
