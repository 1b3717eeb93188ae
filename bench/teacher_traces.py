"""Real teacher distributions: recorded with the packaged model on public data, and summarised.

Run: .venv/bin/python bench/teacher_traces.py record     (about 30 minutes on 2 cores)
     .venv/bin/python bench/teacher_traces.py summary    (seconds)

``record`` runs synthesis jobs as the service runs them (the default method: AdaDPSyn with
planned constants, epsilon 4, delta 1e-6, the label counts released) with the default CPU
model on the public benchmark sets in ../shared/data, each standing in for a private set:
SST-2, TREC, TREC-14 (14 of TREC's fine classes), AG News, MIT-G, CommitmentBank and IMDB,
at several M, N and shot counts. Every token step's M x K teacher distributions are kept
(float16) in ``bench/traces/teachers.npz``, with each job's public shape; no text is kept.
The data are public, so recording them costs nothing and the traces may steer the planner's
validation (``tests/privacy/test_planner_traces.py``) and the aggregation bench
(``bench/aggregation_fidelity.py --traces``).

``summary`` reports, per job, how often a step's teachers are a *disagreeing mixture*: a
confident minority (10% to 60% of the teachers, each with probability 0.6 or more on one
token A, A the plain mean's argmax) while most of the others prefer one other token B; and
how often the mean of the teachers clipped towards uniform (radius 0.2, 0.5, 0.8) has
another argmax than the plain mean, the flip that makes a clip lose to Tang's mean.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.eval.datasets import default_data_dir, load_split
from app.llm.base import LLMBackend, kv_scope
from app.privacy.geometry import clip_towards_uniform
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import Record
from app.synthesis.generator import partition_sizes, plan_synthesis, synthesize
from app.synthesis.tasks import BUILTIN_TASKS, TaskKind, TaskSpec

TRACES = Path(__file__).resolve().parent / "traces" / "teachers.npz"
EPSILON = 4.0
TMAX = 8  # steps per demonstration recorded (a CPU budget; the task defaults reach 100)
CONFIDENT = 0.6  # a teacher with this much on one token is confident
CLIPS = (0.2, 0.5, 0.8)

CB = TaskSpec(
    name="cb",
    kind=TaskKind.CLASSIFICATION,
    instruction="Given a relation, generate a premise and a hypothesis in that relation.",
    icl_instruction="Does the premise entail the hypothesis, contradict it, or neither?",
    text_field="Premise and hypothesis",
    label_field="Relation",
    labels=("entailment", "contradiction", "neutral"),
)
IMDB = TaskSpec(
    name="imdb",
    kind=TaskKind.CLASSIFICATION,
    instruction="Given a sentiment, generate the opening of a movie review with that sentiment.",
    icl_instruction="Classify the sentiment of each movie review as negative or positive.",
    text_field="Review",
    label_field="Sentiment",
    labels=("negative", "positive"),
)


@dataclass(frozen=True)
class Job:
    """One recorded job: its public set and shape."""

    dataset: str
    M: int
    N: int
    shots: int

    @property
    def key(self) -> str:
        return f"{self.dataset}_M{self.M}_N{self.N}_s{self.shots}"


JOBS = (
    Job("sst2", 10, 2, 2),
    Job("sst2", 20, 1, 2),
    Job("trec", 20, 2, 2),
    Job("trec14", 10, 1, 4),
    Job("agnews", 10, 1, 2),
    Job("mitg", 10, 1, 2),
    Job("cb", 10, 1, 3),
    Job("imdb", 10, 1, 2),
)


def records_of(dataset: str, data_dir: Path) -> tuple[TaskSpec, list[Record]]:
    """The public set standing in for private data, and its task."""
    if dataset == "cb":
        rows = [json.loads(line) for line in (data_dir / "cb" / "train.jsonl").open()]
        return CB, [
            Record(f"{row['premise']} Hypothesis: {row['hypothesis']}", row["label"])
            for row in rows
        ]
    if dataset == "imdb":
        path = data_dir / "imdb" / "test_sample2000.jsonl"
        rows = [json.loads(line) for line in path.open()]
        # the first 300 characters: a review's opening, so that M prompts fit a CPU step
        return IMDB, [
            Record(row["text"][:300], ("negative", "positive")[row["label"]]) for row in rows
        ]
    train, _test = load_split(dataset, data_dir)
    return BUILTIN_TASKS[dataset], train


class Recorder:
    """A backend that passes every call through and keeps each teacher call's rows: in a
    private job every ``next_token_probs`` call is one step's teachers (shot-major, M each)."""

    def __init__(self, inner: LLMBackend, M: int) -> None:
        self.inner, self.M, self.steps = inner, M, []

    def __getattr__(self, name: str) -> object:
        if name == "kv_scope":  # the caller scopes the inner backend; this one records
            raise AttributeError(name)
        return getattr(self.inner, name)

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        probs = self.inner.next_token_probs(prompts, token_sets)
        self.steps.extend(probs.reshape(-1, self.M, probs.shape[-1]))
        return probs


def record(job: Job, backend: LLMBackend, data_dir: Path, seed: int) -> tuple[np.ndarray, dict]:
    """The job's teacher steps (S x M x K) and its public shape."""
    task, records = records_of(job.dataset, data_dir)
    config = SynthesisConfig.for_task(
        task.name, M=job.M, N=job.N, shots=job.shots, tmax=TMAX, epsilon=EPSILON, seed=seed
    )
    sizes = partition_sizes(task, records)
    plan = plan_synthesis(task, sizes, config)
    with kv_scope(backend) as scoped:
        recorder = Recorder(scoped, job.M)
        synthesize(task, records, config, recorder, job=plan)  # type: ignore[arg-type]
    shape = {
        "M": job.M,
        "N": job.N,
        "K": config.K,
        "tmax": TMAX,
        "label_sizes": {label: sizes.get(label, 0) for label in plan.charged()},
        "shots": plan.charged(),
        "epsilon": EPSILON,
        "delta": plan.delta,
    }
    return np.asarray(recorder.steps, dtype=np.float16), shape


def record_all(jobs: Sequence[Job], seed: int) -> None:
    """Record ``jobs`` one by one, each saved as it ends (beside those already recorded)."""
    from app.llm.factory import BackendKind, make_backend

    backend = make_backend(BackendKind.TRANSFORMERS, model=None, url=None)
    for job in jobs:
        start = time.perf_counter()
        probs, shape = record(job, backend, default_data_dir(), seed)
        _save(job.key, probs, shape)
        print(f"{job.key}: {len(probs)} steps, {time.perf_counter() - start:.0f} s", flush=True)
    print(f"{TRACES}: {TRACES.stat().st_size / 1e6:.1f} MB")


def _save(key: str, probs: np.ndarray, shape: dict) -> None:
    arrays, shapes = {}, {}
    if TRACES.exists():
        with np.load(TRACES) as data:
            shapes = json.loads(str(data["shapes"]))
            arrays = {name: data[name] for name in shapes}
    arrays[key], shapes[key] = probs, shape
    TRACES.parent.mkdir(exist_ok=True)
    np.savez_compressed(TRACES, shapes=np.array(json.dumps(shapes)), **arrays)


def load_traces(path: Path = TRACES) -> dict[str, tuple[np.ndarray, dict]]:
    """Recorded job -> (steps x M x K float64 distributions, public shape)."""
    with np.load(path) as data:
        shapes = json.loads(str(data["shapes"]))
        out = {}
        for key, shape in shapes.items():
            probs = data[key].astype(np.float64)
            out[key] = (probs / probs.sum(-1, keepdims=True), shape)
    return out


def disagreeing_mixture(probs: np.ndarray) -> np.ndarray:
    """Per step: a confident minority (10-60% of teachers with >= CONFIDENT on the plain
    mean's argmax A) while most of the other teachers share one top token B != A."""
    M = probs.shape[1]
    clean = probs.mean(1).argmax(-1)
    top = probs.argmax(-1)
    sure_in_a = (top == clean[:, None]) & (probs.max(-1) >= CONFIDENT)
    share = sure_in_a.mean(1)
    out = np.zeros(len(probs), dtype=bool)
    for step in np.flatnonzero((share >= 0.1) & (share <= 0.6)):
        others = top[step][~sure_in_a[step]]
        token, count = Counter(others.tolist()).most_common(1)[0]
        out[step] = token != clean[step] and count > (M - sure_in_a[step].sum()) / 2
    return out


def flips(probs: np.ndarray, clip: float) -> np.ndarray:
    """Per step: the clipped mean's argmax differs from the plain mean's."""
    clipped = clip_towards_uniform(probs, clip).mean(1).argmax(-1)
    return clipped != probs.mean(1).argmax(-1)


def summary(path: Path = TRACES) -> None:
    print(
        "| job | steps | disagreeing mixture | "
        + " | ".join(f"flip at clip {c}" for c in CLIPS)
        + " | teachers' top token = mean's |"
    )
    print("|---" * (4 + len(CLIPS)) + "|")
    totals: Counter[str] = Counter()
    for key, (probs, _shape) in load_traces(path).items():
        mixed = disagreeing_mixture(probs)
        flipped = [flips(probs, c) for c in CLIPS]
        agree = (probs.argmax(-1) == probs.mean(1).argmax(-1)[:, None]).mean()
        cells = [f"{mixed.sum()} ({mixed.mean():.1%})"]
        cells += [f"{f.sum()} ({f.mean():.1%})" for f in flipped]
        print(f"| {key} | {len(probs)} | " + " | ".join(cells) + f" | {agree:.2f} |")
        totals["steps"] += len(probs)
        totals["mixed"] += int(mixed.sum())
        for c, f in zip(CLIPS, flipped, strict=True):
            totals[f"flip{c}"] += int(f.sum())
    steps = totals["steps"]
    print(
        f"| all | {steps} | {totals['mixed']} ({totals['mixed'] / steps:.1%}) | "
        + " | ".join(f"{totals[f'flip{c}']} ({totals[f'flip{c}'] / steps:.1%})" for c in CLIPS)
        + " | |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("record", "summary"))
    parser.add_argument("--only", help="record only the jobs whose key starts with this")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "summary":
        summary()
        return 0
    jobs = [j for j in JOBS if args.only is None or j.key.startswith(args.only)]
    record_all(jobs, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
