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


def test_the_cli_options_and_defaults_are_the_configs():
    """Each option of the method is made from its config's field: the flag, the type and the
    default its help shows (none is restated by the CLI)."""
    from app.cli.method_options import method_options
    from app.promptdpsgd.config import PromptDpsgdConfig

    options = {o.flag: o for o in method_options() if "promptdpsgd" in o.params}
    assert set(options) == {
        "--prompt-length", "--steps", "--batch-size", "--learning-rate", "--clip-norm", "--init"
    }  # fmt: skip
    for flag, option in options.items():
        info = PromptDpsgdConfig.model_fields[option.params["promptdpsgd"].name]
        default = getattr(info.default, "value", info.default)
        assert f"Default {default}." in option.help(), flag
        assert option.annotation is info.annotation, flag
    shown = runner.invoke(app, ["synthesize", "--help"], env={"COLUMNS": "200"})
    assert "promptdpsgd: DP-SGD steps. Range [1, 10000]. Default 60." in shown.output
