"""Benchmark: a short chat beside a long one on the embedded engine, before and after.

Run: .venv/bin/python bench/engine_share.py [--root CHECKOUT] [--long-chars 8000]
        [--rounds 2] [--json out.json]

It starts ``dpsyn serve`` (the embedded deployment, the packaged CPU model) from ``--root``
(default: this checkout; a worktree of an older commit measures "before"), stores the
README's TREC prompt (``bench/traces/trec_readme_prompt.json``, as bench/chat_labels.py does)
for two tenants, and times through the ``openai`` package:

* **short label**: tenant B's question in the default form (a classification prompt answers
  with one of its labels);
* **short text**: the same question in free text (``response_format`` text, 8 tokens);
* **long**: tenant A's free-text chat whose message is ``--long-chars`` characters (16
  tokens), the request that held the engine in the review (8,000 characters, 35 s; 15,990
  held it 190 s).

Each of ``--rounds`` rounds times the short requests alone, then beside a long one (paired,
so that the machine's other work weighs on both alike): the long request starts, and 2 s
later (it is reading its prompt) the short ones are sent, one after the other. The table
gives each request's wall time; the verdict compares the short requests beside the long one
with their time alone. Exit status 1 when a short request beside the long one takes more
than 2 s longer than alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from chat_labels import DEFAULT_PROMPT, start, store  # noqa: E402
from load import HOST, free_port, stop_server  # noqa: E402

from app.db.migrate import upgrade  # noqa: E402
from app.db.session import get_engine  # noqa: E402

QUESTION = "What is the capital city of Australia?"
FILLER = "The river runs past the old mill and the miller counts his sacks of grain. "
HEAD_START_S = 2.0  # the long request is reading its prompt when the short ones are sent
SLOWER_BY_S = 2.0  # the verdict's bound on what a long request may add to a short one


def timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def requests(base: str, long: tuple[str, str], short: tuple[str, str], long_chars: int) -> dict:
    """The three requests of the module docstring, as calls; ``long`` and ``short`` are each
    tenant's (prompt ID, key)."""
    long_client = openai.OpenAI(base_url=f"{base}/v1", api_key=long[1], timeout=900)
    short_client = openai.OpenAI(base_url=f"{base}/v1", api_key=short[1], timeout=900)
    text = {"response_format": {"type": "text"}}
    long_message = (FILLER * (long_chars // len(FILLER) + 1))[:long_chars]

    def chat(client: openai.OpenAI, content: str, tokens: int, **extra: Any) -> None:
        client.chat.completions.create(
            model=long[0] if client is long_client else short[0],
            messages=[{"role": "user", "content": content}],
            max_tokens=tokens,
            extra_body=extra or None,
        )

    return {
        "short label": lambda: chat(short_client, QUESTION, 8),
        "short text": lambda: chat(short_client, QUESTION, 8, **text),
        "long": lambda: chat(long_client, long_message, 16, **text),
    }


def beside(calls: dict) -> dict[str, float]:
    """One round: the long request, and the short ones after ``HEAD_START_S``."""
    times: dict[str, float] = {}
    long = threading.Thread(target=lambda: times.update(long=timed(calls["long"])))
    long.start()
    time.sleep(HEAD_START_S)
    for name in ("short label", "short text"):
        times[name] = timed(calls[name])
    long.join()
    return times


def measure(calls: dict, rounds: int) -> list[dict[str, dict[str, float]]]:
    """``rounds`` pairs: the short requests alone, then beside a long one (paired, so that
    the machine's other work weighs on both alike)."""
    for name in ("short label", "short text"):
        calls[name]()  # warm: the first answer loads the model
    pairs = []
    for _ in range(rounds):
        alone = {name: timed(calls[name]) for name in ("short label", "short text")}
        pairs.append({"alone": alone, "beside": beside(calls)})
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose server runs")
    parser.add_argument("--long-chars", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", str(args.root), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    prompt = json.loads(DEFAULT_PROMPT.read_text())
    with tempfile.TemporaryDirectory(prefix="dpsyn-engine-share-") as tmp:
        data_dir = Path(tmp)
        url = f"sqlite:///{data_dir / 'dpsyn.db'}"
        upgrade(url)
        port = free_port()
        with open(data_dir / "server.log", "w+b") as log:
            server = start(args.root, data_dir, port, log)
            try:
                long, short = store(url, prompt), store(url, prompt)  # two tenants
                get_engine(url).dispose()
                calls = requests(f"http://{HOST}:{port}", long, short, args.long_chars)
                pairs = measure(calls, args.rounds)
            finally:
                stop_server(server)
    worst = report(pairs, commit, args.long_chars)
    if args.json:
        args.json.write_text(json.dumps({"commit": commit, "rounds": pairs}, indent=1))
    sys.exit(1 if worst > SLOWER_BY_S else 0)


def report(pairs: list[dict[str, dict[str, float]]], commit: str, long_chars: int) -> float:
    """Print the table; return the most a long request added to a short one (seconds)."""
    print(f"commit {commit}, long message {long_chars} characters, seconds per request")
    print("| round | short label alone | beside the long one | short text alone | beside | long |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for index, pair in enumerate(pairs, start=1):
        alone, beside_ = pair["alone"], pair["beside"]
        print(f"| {index} | {alone['short label']:.2f} | {beside_['short label']:.2f} | "
              f"{alone['short text']:.2f} | {beside_['short text']:.2f} | "
              f"{beside_['long']:.2f} |")  # fmt: skip
        worst = max(worst, *(beside_[n] - alone[n] for n in alone))
    print(f"verdict: a long request added at most {worst:.2f} s to a short one")
    return worst


if __name__ == "__main__":
    main()
