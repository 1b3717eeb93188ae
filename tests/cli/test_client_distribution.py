"""The light client as an app installs it (issue 44): the ``dpsyn-client`` wheel built from
``clients/python``, pure Python, httpx its only dependency, installed into a clean virtualenv
with nothing of dpsyn in it, used by an app that has its own ``app`` package (which hid
``app.client`` before), against the live test server."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.synthesis.tasks import BUILTIN_TASKS
from tests.cli.live_server import FAST, KEY, upload
from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".venv" / "client-wheels"  # httpx and its dependencies (scripts/setup.sh)
HEAVY = ("torch", "transformers", "celery", "fastapi", "sqlalchemy", "numpy", "dpsyn")


@pytest.fixture(scope="module")
def client_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(ROOT / "clients" / "python")],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("dpsyn_client-*.whl")
    return wheel


def test_the_wheel_is_pure_python_and_needs_httpx_alone(client_wheel: Path) -> None:
    assert client_wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(client_wheel) as wheel:
        names = wheel.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = wheel.read(meta).decode()
    assert all(n.startswith("dpsyn_client") for n in names), names
    assert "dpsyn_client/py.typed" in names
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires == ["Requires-Dist: httpx>=0.23"]
    assert "Requires-Python: >=3.9" in metadata and "Name: dpsyn-client" in metadata


def prompt_and_reader(dpsyn, trec_file: Path) -> tuple[str, str]:
    """A finished job's prompt on the live server, and a new prompts:read key."""
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    submitted = dpsyn("jobs", "submit", "--dataset", dataset, "--epsilon", "2", *FAST,
                      "--wait", "--poll", "0.1", "-q")  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    created = dpsyn("keys", "create", "--scope", "prompts:read", "--json")
    assert created.exit_code == 0, created.output
    return submitted.stdout.strip().splitlines()[-1], json.loads(created.stdout)["key"]


def clean_venv(tmp_path: Path, client_wheel: Path, *also: str) -> Path:
    """A new virtualenv holding the client wheel (and ``also``), from local wheels only."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index"]
    subprocess.run([*pip, "--find-links", str(WHEELS), str(client_wheel), *also], check=True,
                   capture_output=True, text=True, timeout=300)  # fmt: skip
    return venv


APP = """
import json, sys
import app  # the app's own package of that name
from dpsyn_client import ApiError, PromptClient

url, key, prompt_id = sys.argv[1:]
with PromptClient(url, key) as dpsyn:
    first = dpsyn.get_prompt(prompt_id)
    again = dpsyn.get_prompt(prompt_id)  # revalidated: a 304, the kept prompt
    messages = dpsyn.messages(prompt_id, "Where is Paris ?")
    answer = dpsyn.complete(prompt_id, "Where is Paris ?")
    try:
        dpsyn.get_prompt("0" * 32)
        missing = None
    except ApiError as error:
        missing = [error.status, error.code]
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
print(json.dumps({"own_app": app.MARK, "same": first is again, "messages": messages,
                  "label": answer.get("label"), "missing": missing, "loaded": loaded}))
"""


def test_an_app_with_its_own_app_package_uses_the_installed_client(
    client_wheel: Path, dpsyn, server, trec_file, tmp_path: Path
) -> None:
    if not any(WHEELS.glob("httpx-*.whl")):
        skip_or_fail(f"no httpx wheel in {WHEELS}: scripts/setup.sh downloads it")
    prompt_id, reader = prompt_and_reader(dpsyn, trec_file)
    venv = clean_venv(tmp_path, client_wheel)
    project = tmp_path / "the_app"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text("MARK = 'the app of its own'\n")
    (project / "main.py").write_text(APP % (HEAVY,))
    run = subprocess.run(
        [str(venv / "bin" / "python"), "main.py", server, reader, prompt_id],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["own_app"] == "the app of its own" and out["same"] is True
    assert out["messages"][0]["role"] == "system" and out["messages"][-1] == {
        "role": "user",
        "content": "Question: Where is Paris ?",
    }
    assert out["label"] in BUILTIN_TASKS["trec"].labels
    assert out["missing"] == [404, "not_found"]
    assert out["loaded"] == []  # nothing heavy came with it
    assert KEY not in run.stdout


# The ten-line app of docs/client.md: the official openai package reads a DP prompt through the
# service's OpenAI-compatible endpoint (the prompt ID as the model, a read key as the API key).
OPENAI_APP = """
import json, sys
from openai import OpenAI, NotFoundError, AuthenticationError

url, key, prompt_id = sys.argv[1:4]
client = OpenAI(base_url=url + "/v1", api_key=key)
question = [{"role": "user", "content": "Question: Where is Paris ?"}]
answer = client.chat.completions.create(model=prompt_id, messages=question, max_tokens=3)
streamed = client.chat.completions.create(
    model=prompt_id, messages=question, max_tokens=3, stream=True)
pieces = [c.choices[0].delta.content or "" for c in streamed if c.choices]
errors = []
for model, api_key in (("0" * 32, key), (prompt_id, "not-a-key")):
    try:
        OpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0).chat.completions.create(
            model=model, messages=question, max_tokens=1)
    except (NotFoundError, AuthenticationError) as error:
        errors.append([type(error).__name__, error.status_code, error.code])
models = [m.id for m in client.models.list()]
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
print(json.dumps({"answer": answer.choices[0].message.content, "usage": answer.usage.total_tokens,
                  "streamed": "".join(pieces), "errors": errors, "models": models,
                  "loaded": loaded}))
"""


def test_the_openai_package_reads_a_dp_prompt_through_the_service(
    client_wheel: Path, dpsyn, server, trec_file, tmp_path: Path
) -> None:
    if not any(WHEELS.glob("openai-*.whl")):
        skip_or_fail(f"no openai wheel in {WHEELS}: scripts/setup.sh downloads it")
    prompt_id, reader = prompt_and_reader(dpsyn, trec_file)
    venv = clean_venv(tmp_path, client_wheel, "openai")
    (tmp_path / "main.py").write_text(OPENAI_APP % (HEAVY,))
    run = subprocess.run(
        [str(venv / "bin" / "python"), "main.py", server, reader, prompt_id],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["streamed"] == out["answer"]  # greedy: the same answer
    trec = BUILTIN_TASKS["trec"]
    assert out["answer"] in [trec.verbalise(label) for label in trec.labels]  # a label's word
    assert out["usage"] > 3
    assert out["errors"] == [
        ["NotFoundError", 404, "not_found"],
        ["AuthenticationError", 401, "unauthorized"],
    ]
    assert out["models"] == [prompt_id]
    assert out["loaded"] == []
