"""The thin HTTP client (``dpsyn jobs ...``) knows no method: it imports neither the registry
nor an algorithm, and names none. What it shows about a method (the progress unit, the
settings line, a finished job's summary) comes from the server's job JSON."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.cli.client.jobs import _describe_job, _flag_params
from app.methods.kinds import MethodKind

CLI = Path(__file__).resolve().parents[2] / "app" / "cli"
# Every module of the thin client: its commands, its HTTP client, its error wording.
CLIENT_MODULES = (
    *(f"client/{name}.py" for name in ("common", "datasets", "budget", "jobs", "prompts")),
    "keys.py",
    "http_client.py",
    "vocabulary.py",
    "config.py",
)
FORBIDDEN = ("app.methods", "app.cli.method_options", "app.cli.synthesize", "torch", "transformers")


@pytest.mark.parametrize("module", CLIENT_MODULES)
def test_the_client_imports_no_method_code_and_names_no_method(module: str) -> None:
    source = (CLI / module).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
    assert not [m for m in imported if m.startswith(FORBIDDEN)], imported
    if module == "client/datasets.py":
        assert "app.cli.options" in imported  # the check does see imports
    named = [kind.value for kind in MethodKind if f'"{kind.value}"' in source]
    assert named == []


def test_a_job_is_described_from_its_json() -> None:
    job = {
        "id": "j1", "status": "succeeded", "method": "anything", "shots": 0, "epsilon": 1.0,
        "delta": 0.01, "dataset_id": "d1", "progress": {"done": 3, "total": 3, "unit": "echoes"},
        "summary": "3 echoes", "prompt_id": "p1",
    }  # fmt: skip
    assert _describe_job(job) == (
        "job j1 succeeded: anything, epsilon 1 at delta 0.01, dataset d1, progress 3/3 echoes, "
        "3 echoes; prompt p1"
    )


def test_a_cancelled_or_failed_job_says_what_it_is_charged_and_why() -> None:
    job = {
        "id": "j2", "status": "cancelled", "method": "anything", "shots": 0, "epsilon": 1.0,
        "delta": 0.01, "dataset_id": "d1", "progress": {"done": 0, "total": 3, "unit": "echoes"},
        "charged_epsilon": 0.0, "charge_note": "released: it never read a private record",
    }  # fmt: skip
    assert _describe_job(job).endswith(
        "progress 0/3 echoes; charged epsilon 0: released: it never read a private record"
    )
    running = {**job, "status": "running", "cancel_requested": True, "charged_epsilon": 1.0,
               "charge_note": "reserved: epsilon 1 is held"}  # fmt: skip
    assert _describe_job(running).endswith("echoes; reserved: epsilon 1 is held")
    done = {**job, "status": "succeeded", "charge_note": "charged: it released a prompt"}
    assert "charged" not in _describe_job(done)  # a prompt says it was charged


def test_method_parameters_are_options_of_their_own() -> None:
    assert _flag_params(["--M", "4", "--max-public=40", "--variant", "paper"]) == {
        "M": 4,
        "max_public": 40,
        "variant": "paper",
    }
    for bad in (["4"], ["--M"], ["--M", "--N", "2"]):
        try:
            _flag_params(bad)
        except Exception as error:  # ClientError: a usage problem, exit status 2
            assert getattr(error, "code", None) == 2 and "--NAME VALUE" in str(error)
        else:
            raise AssertionError(bad)
