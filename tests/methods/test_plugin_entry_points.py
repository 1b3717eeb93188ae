"""Every ``dpsyn`` command that runs methods loads ``DPSYN_METHOD_MODULES`` before it builds
its options: the real entry point (``app.cli.main``) in its own process, with the test-only
method Echo (``tests/methods/echo.py``) registered by a plug-in module on the path and no
other file edited.

A second module on the list, the harness, only swaps the model for the fake backends (the
commands would load a real one) and notes which methods were registered when it loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.privacy.events import to_dict
from app.privacy.unit import DEFAULT_DELTA
from app.synthesis.tasks import classification_task
from tests.cli.live_server import free_port
from tests.cli.test_serve_deployment import serve_env, serving
from tests.methods.echo import EchoConfig, EchoPlan

ROOT = Path(__file__).resolve().parents[2]
ALL = "tang,adadpsyn,promptpate,promptdpsgd,echo"  # the registry, as the harness saw it
PLUGIN = "from app.methods import register\nfrom tests.methods.echo import ECHO\n\nregister(ECHO)\n"
HARNESS = """
import os, sys
import app.cli.audit, app.cli.eval, app.cli.synthesize
from app.methods.registry import METHODS
from tests.eval.test_audit import MemoryBackend
from tests.eval.test_experiment import EvalFake, _records
from tests.synthesis.fake_backend import FakeBackend

app.cli.synthesize.make_backend = lambda kind, **kw: FakeBackend(stop_after=2)
app.cli.eval.make_backend = lambda kind, model, url, dtype: EvalFake(marker="Question:")
app.cli.eval.load_split = lambda dataset, data_dir: _records()
app.cli.audit.make_backend = lambda kind, model, url, dtype: MemoryBackend()
with open(os.environ["ECHO_MARKER"], "a") as marker:
    marker.write(f"{sys.argv[1]}: {','.join(METHODS)}\\n")
"""


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The environment of a ``dpsyn`` process that loads the plug-in and the harness."""
    (tmp_path / "echo_plugin.py").write_text(PLUGIN)
    (tmp_path / "echo_harness.py").write_text(HARNESS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
        DPSYN_METHOD_MODULES="echo_plugin, echo_harness",
        ECHO_MARKER=str(tmp_path / "marker.txt"),
        COLUMNS="200",
    )
    return env


def dpsyn(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from app.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_synthesize_offers_and_runs_the_plugin(env, tmp_path) -> None:
    shown = dpsyn(env, tmp_path, "synthesize", "--help")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "--echo-repeat" in shown.stdout and "|echo" in shown.stdout
    data = tmp_path / "tickets.csv"
    rows = [f"ticket {i},{'billing' if i % 2 else 'network'}" for i in range(20)]
    data.write_text("text,category\n" + "\n".join(rows) + "\n")
    task = ["--task", "custom", "--labels", "billing,network", "--label-col", "category"]
    out = tmp_path / "echo.json"
    ran = dpsyn(
        env,
        tmp_path,
        *["synthesize", "--data", str(data), *task, "--method", "echo", "--echo-repeat", "3"],
        *["--shots", "2", "--epsilon", "2", "--out", str(out)],
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    texts = [d["text"] for d in json.loads(out.read_text())["demonstrations"]]
    assert texts == ["echo-billing echo-billing echo-billing", "echo-network " * 2 + "echo-network"]


def test_eval_offers_and_runs_the_plugin(env, tmp_path) -> None:
    shown = dpsyn(env, tmp_path, "eval", "--help")
    assert "promptdpsgd, echo)" in shown.stdout  # --methods names the registered ones
    args = ["eval", "--dataset", "trec", "--seeds", "1", "--epsilons", "8", "--no-baselines"]
    ran = dpsyn(env, tmp_path, *args, "--out-dir", str(tmp_path), "--methods", "echo")
    assert ran.returncode == 0, ran.stderr[-2000:]
    runs = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert [r["setting"] for r in runs] == ["zero-shot", "echo@8"]


def test_audit_offers_and_attacks_the_plugin(env, tmp_path) -> None:
    shown = dpsyn(env, tmp_path, "audit", "--help")
    assert "--echo-repeat" in shown.stdout and "promptdpsgd, echo)" in shown.stdout
    data = tmp_path / "data" / "sst2"
    data.mkdir(parents=True)
    lines = [f"{i % 2} review number {i} of the set" for i in range(80)]
    (data / "stsa.binary.train").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    ran = dpsyn(
        env,
        tmp_path,
        *["audit", "--data-dir", str(tmp_path / "data"), "--out-dir", str(out)],
        *["--trials", "2", "--candidates", "3", "--methods", "echo:2", "--members", "4"],
        *["--echo-repeat", "3"],
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    attack = json.loads((out / "audit.json").read_text())["attacks"]["echo"]
    assert attack["trials"] == 2 and attack["repeat"] == 3 and attack["members_per_trial"] == 4
    assert attack["auc_mean"] == 0.5  # its prompt holds label names only: nothing to find
    assert "Echo (tests) 1-shot prompt" in (out / "audit.md").read_text()


def test_privacy_quotes_the_plugin(env, tmp_path) -> None:
    """``dpsyn privacy quote`` prices a job of the plug-in's method on a public shape, with
    its option generated from its declaration, through the service's planning: the epsilon
    is what Echo's own plan computes (its event priced here, in this process), and the
    option reaches Echo's config (a bound of its declaration refuses 9; 3 is kept)."""
    shown = dpsyn(env, tmp_path, "privacy", "quote", "--help")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "--echo-repeat" in shown.stdout and "|echo" in shown.stdout
    shape = ["--labels", "billing,network", "--n-label", "10", "--epsilon", "2", "--json"]
    quoted = dpsyn(
        env, tmp_path, "privacy", "quote", "--method", "echo", "--echo-repeat", "3", *shape
    )
    assert quoted.returncode == 0, quoted.stderr[-2000:]
    quote = json.loads(quoted.stdout)
    config = EchoConfig(epsilon=2.0, delta=DEFAULT_DELTA, shots=2, repeat=3)
    task = classification_task(["billing", "network"])
    own = EchoPlan(task, config, planned={"billing": 10, "network": 10})
    assert quote["epsilon"] == pytest.approx(own.epsilon(), rel=1e-12)
    assert quote["delta"] == own.delta == DEFAULT_DELTA
    assert quote["event"] == to_dict(own.event())
    assert quote["config"]["echo"]["repeat"] == 3  # the default is 2
    refused = dpsyn(
        env, tmp_path, "privacy", "quote", "--method", "echo", "--echo-repeat", "9", *shape
    )
    assert refused.returncode == 2
    assert "'repeat'" in refused.stderr and "Traceback" not in refused.stderr
    assert (tmp_path / "marker.txt").read_text() == f"privacy: {ALL}\n" * 3


def test_privacy_loads_the_plugins_and_a_client_command_does_not(env, tmp_path) -> None:
    """Every ``dpsyn privacy`` command loads the plug-ins (the token loop's own commands
    too), so a broken one is named there; ``dpsyn config`` (the thin client's) knows no
    method and loads none."""
    priced = dpsyn(env, tmp_path, "privacy", "epsilon", "--sigma1", "1.0")
    assert priced.returncode == 0, priced.stderr[-2000:]
    assert (tmp_path / "marker.txt").read_text() == f"privacy: {ALL}\n"
    env["DPSYN_METHOD_MODULES"] = "echo_plugin, no_such_plugin"
    broken = dpsyn(env, tmp_path, "privacy", "epsilon", "--sigma1", "1.0")
    assert broken.returncode == 2
    assert "DPSYN_METHOD_MODULES: cannot import 'no_such_plugin'" in broken.stderr
    client = dpsyn(env, tmp_path, "config", "--help")
    assert client.returncode == 0, client.stderr[-2000:]


def test_serve_documents_the_plugin(env, tmp_path) -> None:
    settings = {k: v for k, v in env.items() if k.startswith(("DPSYN_", "ECHO_"))}
    settings["PYTHONPATH"] = env["PYTHONPATH"]
    served = {**serve_env(free_port()), **settings}
    with serving(tmp_path, served) as url:
        schemas = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]
    assert "echo" in schemas["JobCreate"]["properties"]["method"]["enum"]
    assert "repeat" in schemas["JobParams"]["properties"]


def test_worker_loads_the_plugin_at_start(env, tmp_path) -> None:
    """``dpsyn worker`` (its broker unreachable: it is stopped once the plug-ins loaded)."""
    env["DPSYN_BROKER_URL"] = "redis://127.0.0.1:1/0"
    marker = tmp_path / "marker.txt"
    process = subprocess.Popen(
        [sys.executable, "-c", "from app.cli import main; main()", "worker"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=60)
    assert marker.read_text() == f"worker: {ALL}\n"
