"""``dpsyn prompts get|complete`` through the downstream client (dpsyn_client, clients/python), and
``prompts get --format messages``; against the live test server of ``conftest.py``."""

from __future__ import annotations

import json

import numpy as np
from dpsyn_client.chat import chat_messages

from app.cli import app as cli
from app.db.models import PromptSet
from app.db.session import session_scope
from app.promptdpsgd.artifact import SoftPrompt
from app.services.jobs import attach_soft_prompt
from app.synthesis.tasks import BUILTIN_TASKS
from tests.cli.live_server import FAST, KEY, SECRET, free_port, runner, upload


def _prompts(dpsyn, trec_file, count: int) -> list[str]:
    """``count`` prompts of finished jobs on one TREC dataset."""
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    return [_prompt(dpsyn, dataset) for _ in range(count)]


def _prompt(dpsyn, dataset: str) -> str:
    submitted = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--epsilon", "2", *FAST, "--wait",
        "--poll", "0.1", "-q",
    )  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    return submitted.stdout.strip().splitlines()[-1]


def test_prompts_get_format_messages_prints_the_chat_messages(dpsyn, trec_file, sqlite_url):
    prompt_id, soft_id = _prompts(dpsyn, trec_file, 2)
    as_json = dpsyn("prompts", "get", prompt_id, "--json")
    assert as_json.exit_code == 0, as_json.output
    prompt = json.loads(as_json.stdout)
    shown = dpsyn("prompts", "get", prompt_id, "--format", "messages")
    assert shown.exit_code == 0, shown.output
    messages = json.loads(shown.stdout)
    assert messages == chat_messages(prompt)
    demos, trec = prompt["demonstrations"], BUILTIN_TASKS["trec"]
    assert demos and [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * len(
        demos
    )
    assert messages[0]["content"] == trec.icl_instruction
    assert [m["content"] for m in messages[1::2]] == [f"Question: {d['text']}" for d in demos]
    assert [m["content"] for m in messages[2::2]] == [trec.verbalise(d["label"]) for d in demos]
    assert SECRET not in shown.output

    unknown = dpsyn("prompts", "get", prompt_id, "--format", "chatml")
    assert unknown.exit_code == 2 and "'text'" in unknown.output and "'messages'" in unknown.output

    with session_scope(sqlite_url) as session:  # never read yet, so not in the server's cache
        row = session.get(PromptSet, soft_id)
        assert row is not None
        attach_soft_prompt(row, SoftPrompt("fake", np.random.default_rng(5).normal(size=(2, 4))))
        row.prompt, row.demonstrations = "", []
    soft = dpsyn("prompts", "get", soft_id, "--format", "messages")
    assert soft.exit_code == 1
    assert soft.output.startswith(f"error: prompt '{soft_id}' is a soft prompt (promptdpsgd)")
    assert soft.output.endswith(f"through 'dpsyn prompts complete {soft_id}'\n")
    assert soft.output.count("\n") == 1


def test_prompts_get_and_complete_report_errors_as_before(dpsyn, monkeypatch):
    missing = dpsyn("prompts", "get", "nope")
    assert missing.exit_code == 1
    assert missing.output == "error: prompt 'nope' not found (not_found, HTTP 404)\n"
    wrong = dpsyn("prompts", "get", "nope", "--format", "messages", "--key", "wrong")
    assert wrong.output == "error: invalid or revoked API key (unauthorized, HTTP 401)\n"
    empty = dpsyn("prompts", "complete", "nope", "--query", "")
    assert empty.exit_code == 1 and "--query" in empty.output and "HTTP 422" in empty.output
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("DPSYN_API_KEY", KEY)
    gone = runner.invoke(cli, ["prompts", "complete", "x", "--query", "q", "--url", url])
    assert gone.exit_code == 1
    assert gone.output.startswith(f"error: cannot reach the dpsyn server at {url} (ConnectError)")
