"""``dpsyn synthesize --method promptdpsgd``: trains a soft prompt (tiny local model here)
and writes it next to the JSON result; refuses what it cannot do in one line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.promptdpsgd.artifact import SoftPrompt
from tests.promptdpsgd.tiny import tiny_backend

runner = CliRunner()
BASE = ["--task", "custom", "--labels", "billing,network", "--label-col", "category"]
SMALL = ["--method", "promptdpsgd", "--steps", "2", "--batch-size", "4", "--prompt-length", "3"]


BUILT: list[dict] = []


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    def build(kind, **kw):
        BUILT.append(kw)
        return tiny_backend()

    monkeypatch.setattr("app.cli.synthesize.make_backend", build)


@pytest.fixture
def tickets(tmp_path):
    rows = ["text,category"] + [
        f"secretticket{i} please help,{'billing' if i % 2 else 'network'}" for i in range(30)
    ]
    path = tmp_path / "tickets.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_it_trains_and_writes_the_soft_prompt_beside_the_json(tickets, tmp_path):
    out = tmp_path / "new" / "prompt.json"  # the folder is created
    result = runner.invoke(
        app,
        ["synthesize", "--data", str(tickets), *BASE, *SMALL, "--epsilon", "4", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    soft = SoftPrompt.from_bytes((tmp_path / "new" / "prompt.safetensors").read_bytes())
    assert soft.model == "tiny-llama" and soft.length == 3
    assert doc["soft_prompt"]["sha256"] == soft.sha256
    assert doc["method"] == "promptdpsgd" and doc["demonstrations"] == []
    assert doc["epsilon"] <= 4.0 and doc["event"]["type"] == "dpsgd"
    assert "soft prompt" in result.stdout and "secretticket" not in result.output
    assert "secretticket" not in out.read_text()
    assert BUILT[-1]["dtype"] == "float32"  # auto: training in bfloat16 is 5x slower on CPU


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "vllm", "--url", "http://x"], "needs gradients"),
        ([], "needs --out FILE.json"),
        (["--shots", "2"], "promptdpsgd takes no shots"),
        (["--teachers", "3"], "--teachers are for promptpate, not promptdpsgd"),
        (["--steps", "3", "--method", "tang"], "--batch-size are for promptdpsgd, not tang"),
    ],
)
def test_what_it_cannot_do_is_refused_in_one_line(tickets, args, message):
    result = runner.invoke(app, ["synthesize", "--data", str(tickets), *BASE, *SMALL, *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_cli_defaults_are_the_configs():
    import inspect

    from app.cli.synthesize import PARAM_OPTIONS, synthesize_command
    from app.promptdpsgd.config import PromptDpsgdConfig

    signature = inspect.signature(synthesize_command).parameters
    for name, info in PromptDpsgdConfig.model_fields.items():
        if name in PARAM_OPTIONS:
            assert signature[PARAM_OPTIONS[name][1]].default == info.default, name
