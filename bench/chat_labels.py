"""Benchmark: docs/client.md's ten-line chat app against ``/complete`` on TREC test questions.

Run: .venv/bin/python bench/chat_labels.py [--root CHECKOUT] [--prompt FILE] [--per-label 5]
        [--json out.json]

It starts ``dpsyn serve`` (the embedded deployment: SQLite in a temporary folder, the packaged
CPU model) from ``--root`` (default: this checkout; a worktree of an older commit measures
"before"), stores the README's TREC prompt in it, and asks the first ``--per-label`` test
questions of each TREC label (``../shared/data/trec/test.txt``; 5 gives 30) through:

* **chat app**: docs/client.md's ``answer_type`` exactly as written there (the ``openai``
  package, ``max_tokens=8``, the reply stripped);
* **chat app, calibrated**: the same with ``extra_body={"calibrated": True}``;
* **completions**: ``/v1/completions`` with the prompt's own form,
  ``"Question: ...\\nAnswer Type:"``, ``max_tokens=8``, the first line of the text stripped;
* **/complete** and **/complete, calibrated**: the service's label scoring
  (``POST /v1/prompts/{id}/complete``).

An answer is right when it is the question's label word (the label's verbaliser,
case-insensitive) and "not a label" when it is none of the prompt's label words; a refused
request counts as neither right nor a label. "Same answer as" counts the questions a route
answers exactly as ``/complete`` does (calibrated: as ``/complete``, calibrated). Every route
answers the same questions with the same prompt, one at a time, and the table shows seconds
per question too (the median wall time; the routes take turns on each question, so the
machine's other work weighs on all alike). Exit status 1 when the chat app's answer differs
from ``/complete``'s on any question (the target of issue 53).

The prompt is the README's job (``scripts/quickstart.sh``: all of TREC's training file, a
budget of epsilon 10, AdaDPSyn at epsilon 8 with the method's defaults: one demonstration per
label). Its noise differs per run, so ``--prompt FILE`` keeps it: when FILE exists its prompt
(``GET /v1/prompts/{id}``'s JSON) is stored in the server's database directly; otherwise the
job runs (a few minutes on two cores) and its prompt is written to FILE, so that a second run
(another checkout) answers with the same prompt. Default FILE:
``bench/traces/trec_readme_prompt.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import HOST, free_port, stop_server, wait_healthy  # noqa: E402
from submission_burst import trec_records  # noqa: E402

from app.db.migrate import upgrade  # noqa: E402
from app.db.models import Dataset, Job, KeyScope, PromptSet  # noqa: E402
from app.db.session import get_engine, session_scope  # noqa: E402
from app.eval.datasets import load_split  # noqa: E402
from app.services.tenants import create_api_key, create_tenant  # noqa: E402
from app.synthesis.data import Record  # noqa: E402
from app.synthesis.tasks import BUILTIN_TASKS  # noqa: E402

ADMIN_KEY = "bench-chat-labels-admin-key-0123456789abcdef"
TREC = BUILTIN_TASKS["trec"]
WORDS = {TREC.verbalise(label).casefold() for label in TREC.labels}
DEFAULT_PROMPT = ROOT / "bench" / "traces" / "trec_readme_prompt.json"


def answer_type(dpsyn: openai.OpenAI, prompt_id: str, question: str, **extra: Any) -> str:
    """docs/client.md's app, as written there (``extra``: the calibrated variant's body)."""
    messages = [{"role": "user", "content": f"Question: {question}"}]
    reply = dpsyn.chat.completions.create(model=prompt_id, messages=messages, max_tokens=8, **extra)
    return reply.choices[0].message.content.strip()  # e.g. "location"


def questions(per_label: int) -> list[Record]:
    """The first ``per_label`` test questions of each TREC label, in label order."""
    _, test = load_split("trec")
    picked = [[r for r in test if r.label == label][:per_label] for label in TREC.labels]
    return [record for group in picked for record in group]


def start(root: Path, data_dir: Path, port: int, log: Any) -> subprocess.Popen:
    """``dpsyn serve`` of the checkout ``root`` on ``data_dir`` (as bench/load.py starts
    one, with this checkout's code replaced by ``root``'s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYN_")}
    env.update(PYTHONPATH=str(root), DPSYN_HOST=HOST, DPSYN_PORT=str(port),
               DPSYN_BOOTSTRAP_API_KEY=ADMIN_KEY)  # fmt: skip
    entry = data_dir / "serve.py"
    entry.write_text("from app.cli import main\nmain()\n")
    command = [sys.executable, str(entry), "serve", "--data-dir", str(data_dir)]
    server = subprocess.Popen(
        command, env=env, cwd=data_dir, stdout=log, stderr=log, start_new_session=True
    )
    return wait_healthy(server, port, log)


def store(url: str, prompt: dict[str, Any]) -> tuple[str, str]:
    """``prompt`` (a prompt's public JSON) stored for a new tenant, and a read key of it."""
    with session_scope(url) as session:
        tenant, _ = create_tenant(session, f"bench-chat-{time.time_ns()}")
        _, key = create_api_key(session, tenant.id, KeyScope.PROMPTS_READ)
        counts = {label: 1 for label in prompt["task_spec"]["labels"]}
        dataset = Dataset(tenant_id=tenant.id, name="trec", task=prompt["task_spec"],
                          label_counts=counts, record_count=len(counts))  # fmt: skip
        session.add(dataset)
        session.flush()
        job = Job(tenant_id=tenant.id, dataset_id=dataset.id, method=prompt["method"],
                  config={}, schedule=[], event={}, epsilon=prompt["epsilon"],
                  delta=prompt["delta"], status="succeeded")  # fmt: skip
        session.add(job)
        session.flush()
        demos = [{"label": d["label"], "text": d["text"]} for d in prompt["demonstrations"]]
        row = PromptSet(tenant_id=tenant.id, job_id=job.id, dataset_id=dataset.id,
                        task=prompt["task_spec"], demonstrations=demos, prompt=prompt["prompt"],
                        method=prompt["method"], model=prompt["model"],
                        epsilon=prompt["epsilon"], delta=prompt["delta"])  # fmt: skip
        session.add(row)
        session.flush()
        return row.id, key


def readme_prompt(base: str) -> dict[str, Any]:
    """The README's job on the running server: TREC's training file, budget 10, AdaDPSyn
    at epsilon 8 with its defaults; its prompt's JSON."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
        upload = http.post("/v1/datasets", json={"task": "trec", "records": trec_records(10**6)})
        upload.raise_for_status()
        dataset_id = upload.json()["id"]
        http.put(f"/v1/datasets/{dataset_id}/budget", json={"epsilon": 10}).raise_for_status()
        body = {"dataset_id": dataset_id, "method": "adadpsyn", "epsilon": 8.0}
        job = http.post("/v1/jobs", json=body)
        job.raise_for_status()
        while job.json()["status"] in ("queued", "running"):
            time.sleep(5)
            job = http.get(f"/v1/jobs/{job.json()['id']}")
        if job.json()["status"] != "succeeded":
            raise SystemExit(f"the README's job ended {job.json()['status']}")
        prompt = http.get(f"/v1/prompts/{job.json()['prompt_id']}")
        prompt.raise_for_status()
        return dict(prompt.json())


def route_answers(base: str, key: str, prompt_id: str) -> dict[str, Callable[[str], str]]:
    """Each measured route: a question in, its answer (a label word or not) out."""
    sdk = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=300)
    http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=300)

    def complete(question: str, calibrated: bool = False) -> str:
        body = {"query": question, "calibrated": calibrated}
        response = http.post(f"/v1/prompts/{prompt_id}/complete", json=body)
        response.raise_for_status()
        return TREC.verbalise(response.json()["label"])

    def text(question: str) -> str:
        completion = sdk.completions.create(
            model=prompt_id, prompt=f"Question: {question}\nAnswer Type:", max_tokens=8
        )
        return completion.choices[0].text.strip().split("\n")[0].strip()

    return {
        "chat app (docs/client.md)": lambda q: answer_type(sdk, prompt_id, q),
        "chat app, calibrated": lambda q: answer_type(
            sdk, prompt_id, q, extra_body={"calibrated": True}
        ),
        "/v1/completions": text,
        "/complete": complete,
        "/complete, calibrated": lambda q: complete(q, calibrated=True),
    }


def ask(answer: Callable[[str], str], question: str) -> tuple[str | None, float]:
    """One route's answer (None: refused) and its seconds."""
    start_s = time.perf_counter()
    try:
        said: str | None = answer(question).casefold()
    except (openai.APIStatusError, httpx.HTTPStatusError):
        said = None
    return said, time.perf_counter() - start_s


def measure(routes: dict[str, Callable[[str], str]], records: list[Record]) -> dict[str, Any]:
    """Every route on every question, the routes in turn on each question (so that the
    machine's other work weighs on all alike), after one warm-up answer (the server loads
    the model on its first): each route's answers, right, not a label, refused, and median
    seconds per question."""
    routes["/complete"](records[0].text)
    asked: dict[str, list[tuple[str | None, float]]] = {name: [] for name in routes}
    for record in records:
        for name, answer in routes.items():
            asked[name].append(ask(answer, record.text))
    truth = [TREC.verbalise(r.label).casefold() for r in records]
    results = {}
    for name, pairs in asked.items():
        answers = [a for a, _ in pairs]
        given = [a for a in answers if a is not None]
        results[name] = {
            "right": sum(a == t for a, t in zip(answers, truth, strict=True)),
            "not_label": sum(a not in WORDS for a in given),
            "refused": len(answers) - len(given),
            "s_per_question": statistics.median(seconds for _, seconds in pairs),
            "answers": answers,
        }
    return results


#: The route each row's answers are compared with: the same decision, by label scoring.
SAME_AS = {"chat app (docs/client.md)": "/complete", "/v1/completions": "/complete",
           "chat app, calibrated": "/complete, calibrated"}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose server runs")
    parser.add_argument("--prompt", type=Path, default=DEFAULT_PROMPT)
    parser.add_argument("--per-label", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    records = questions(args.per_label)
    commit = subprocess.run(["git", "-C", str(args.root), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dpsyn-chat-labels-") as tmp:
        data_dir = Path(tmp)
        url = f"sqlite:///{data_dir / 'dpsyn.db'}"
        upgrade(url)
        port = free_port()
        base = f"http://{HOST}:{port}"
        with open(data_dir / "server.log", "w+b") as log:
            server = start(args.root, data_dir, port, log)
            try:
                if not args.prompt.exists():
                    args.prompt.write_text(json.dumps(readme_prompt(base), indent=1) + "\n")
                prompt_id, key = store(url, json.loads(args.prompt.read_text()))
                get_engine(url).dispose()
                routes = route_answers(base, key, prompt_id)
                results = measure(routes, records)
            finally:
                stop_server(server)
    report(results, len(records), commit)
    if args.json:
        args.json.write_text(json.dumps({"commit": commit, "results": results}, indent=1))
    chat, scored = (results[name]["answers"] for name in ("chat app (docs/client.md)", "/complete"))
    same = sum(a == b for a, b in zip(chat, scored, strict=True))
    print(f"verdict: the chat app answers as /complete on {same} of {len(records)} questions")
    if same < len(records):
        sys.exit(1)


def report(results: dict[str, dict[str, Any]], n: int, commit: str) -> None:
    """The table of docs/results.md, and the answers that are no label."""
    print(f"\n{n} TREC test questions, the server of {commit}")
    print("| route | right | not a label | refused | same answer as | s per question (median) |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        other = SAME_AS.get(name)
        same = ""
        if other is not None:
            pairs = zip(r["answers"], results[other]["answers"], strict=True)
            same = f"{sum(a == b for a, b in pairs)}/{n} {other}"
        print(f"| {name} | {r['right']}/{n} | {r['not_label']}/{n} | {r['refused']}/{n} | "
              f"{same} | {r['s_per_question']:.2f} |")  # fmt: skip
    for name, r in results.items():
        strays = [a for a in r["answers"] if a is not None and a not in WORDS]
        if strays:
            print(f"{name}, answers that are no label: {', '.join(strays)}")


if __name__ == "__main__":
    main()
