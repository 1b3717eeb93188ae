"""Benchmark: throughput of the synthesis token loop on the local transformers backend.

Run: .venv/bin/python bench/synthesis_throughput.py [--model gemma-3-270m] [--task trec]
     [--shots 4] [--tmax 6] [--repeats 3]
     .venv/bin/python bench/synthesis_throughput.py --vllm URL --task agnews [--tmax 20]

Reports, in one run (target: the loop adds under 10% to the time spent in the model):

(a) a real AdaDPSyn job (epsilon 8, fixed seed, the task's paper M and N): prompt tokens/s
    from ``result.stats``, and the seconds spent inside ``next_token_probs`` / ``top_k``
    (a timing proxy around the backend); loop overhead = 1 - backend seconds / job seconds;
(b) one ``last_logits`` call over one step's teacher prompts, built as the generator builds
    them: the model's raw batched throughput, and the job's tokens/s as a fraction of it;
(c) that step batch as ONE ``next_token_probs`` call versus one call per prompt (the pattern
    of the public AdaDPSyn code);
(d) the same batch with the prefix KV cache off / on, and without sorting by length;
(e) the job (same plan, same seed) with the per-prompt KV store of its scope off and on
    (``kv_cache_mb``, incremental decoding, on by default): wall time per job, the job's
    ``tokens_computed``, the distinct tokens of the prompts it sent (each distinct BOS-led
    prefix counted once: the floor of any cache) and the ratio (target <= 1.2), and whether
    the released demonstrations are identical. Token counts depend on the private records'
    lengths: they are printed here only (``KVScope.diagnostics``), never put in a job's
    stats. ``--incremental-only`` runs just (e).

With ``--vllm URL`` (a server started by ``scripts/vllm_serve.sh``) it instead runs the same
job, same seed, on that server and on the local backend, and reports per backend the wall
time of the job, and for vLLM the prefix-cache hit rate from the server's ``/metrics``
(``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``, in prompt tokens,
over the job) beside the best rate any prefix cache could reach on the prompts the job sent
(replayed through an unbounded cache of the server's block size, and of 16 tokens).

Timings (b)-(d) are the best of ``--repeats`` runs (other work on the machine only ever makes a
run slower); (a) runs once. A default run takes about 3 minutes on 2 otherwise idle CPU
cores. Exit status 1 when the loop overhead misses the target.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from app.eval.datasets import paths
from app.llm.base import kv_scope
from app.llm.models import DEFAULT_MODEL
from app.llm.transformers_backend import TransformersBackend
from app.privacy.params import Aggregator
from app.privacy.rng import make_rng
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import load_dataset
from app.synthesis.generator import SynthesisPlan, partition_sizes, plan_synthesis, synthesize
from app.synthesis.prompts import public_prompt, teacher_prompt
from app.synthesis.tasks import get_task

ROOT = Path(__file__).resolve().parent.parent
TARGET_OVERHEAD = 0.10
TARGET_RATIO = 1.2  # (e): tokens computed / distinct tokens with the KV store on


class TimedBackend:
    """The backend, with the seconds spent inside its model calls and the prompt tokens it
    was sent added up (a job's own stats leave token counts out: they depend on the private
    records' lengths)."""

    def __init__(self, inner, *, count_distinct: bool = False) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0
        self.tokens = 0
        self.count_distinct = count_distinct
        self.scope = None  # the job's KVScope once a job ran (local backend)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    @contextmanager
    def kv_scope(self) -> Iterator[TimedBackend]:
        """The job's scope on the inner backend, its calls still timed here (without this,
        ``__getattr__`` would hand the job the inner backend's scope, untimed)."""
        outer = self.inner
        if isinstance(outer, TransformersBackend):
            scope = outer.kv_scope(count_distinct=self.count_distinct)
        else:
            scope = kv_scope(outer)
        with scope as scoped:
            self.inner, self.scope = scoped, scoped
            try:
                yield self
            finally:
                self.inner = outer

    def _timed(self, call: Callable[[], np.ndarray]) -> np.ndarray:
        start = time.perf_counter()
        try:
            return call()
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        self.tokens += sum(len(p) for p in prompts)
        return self._timed(lambda: self.inner.next_token_probs(prompts, token_sets))

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        self.tokens += sum(len(p) for p in prompts)
        return self._timed(lambda: self.inner.top_k(prompts, k))


class RecordingBackend(TimedBackend):
    """A timed backend that also keeps every prompt it scored, in the order sent."""

    def __init__(self, inner, *, count_distinct: bool = False) -> None:
        super().__init__(inner, count_distinct=count_distinct)
        self.sent: list[list[int]] = []

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        self.sent.extend(list(p) for p in prompts)
        return super().next_token_probs(prompts, token_sets)

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        self.sent.extend(list(p) for p in prompts)
        return super().top_k(prompts, k)


def ideal_hit_rate(prompts: Sequence[Sequence[int]], block: int) -> float:
    """Share of prompt tokens an unbounded prefix cache of ``block``-token blocks serves.

    As vLLM's: a prompt reuses its leading full blocks whose whole prefix was seen before,
    never its last token (at least one token is computed); every full block is then kept.
    Prompts of one request count as sequential, so this is an upper bound.
    """
    seen: set[tuple[int, ...]] = set()
    hits = total = 0
    for prompt in prompts:
        total += len(prompt)
        full = len(prompt) // block
        reusable = (len(prompt) - 1) // block
        n = 0
        while n < reusable and tuple(prompt[: (n + 1) * block]) in seen:
            n += 1
        hits += n * block
        seen.update(tuple(prompt[: (i + 1) * block]) for i in range(full))
    return hits / total if total else 0.0


def vllm_counters(url: str) -> dict[str, float]:
    """vLLM's prefix-cache and prompt-token counters and its block size, from ``/metrics``."""
    import httpx

    text = httpx.get(f"{url.rstrip('/')}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        if name in (
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total",
            "vllm:prompt_tokens_total",
        ):
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        elif name == "vllm:cache_config_info" and 'block_size="' in line:
            out["block_size"] = float(line.split('block_size="', 1)[1].split('"', 1)[0])
    return out


def engine_comparison(args: argparse.Namespace, task, records, config) -> int:
    """The same job on the vLLM server and on the local backend: times and cache hits."""
    from app.llm.vllm_http import VLLMHttpBackend, served_model

    job = plan_synthesis(task, partition_sizes(task, records), config)
    runs = []
    with VLLMHttpBackend(url=args.vllm, model=served_model(args.vllm), timeout=600) as remote:
        _ = remote.eos_id, remote.newline_ids  # one-time lookups, not the job's
        before = vllm_counters(args.vllm)
        runs.append(timed_job("vLLM " + remote.name, remote, task, records, config, job))
        after = vllm_counters(args.vllm)
    if not args.no_local:
        local = TransformersBackend(args.model)
        _ = local.newline_ids
        runs.append(
            timed_job(f"local {local.name} ({local.dtype})", local, task, records, config, job)
        )
    sent = runs[0][1].sent
    lengths = [len(p) for p in sent]
    print(
        f"task {task.name}: shots {config.shots}, M {config.M}, N {config.N}, "
        f"tmax {config.tmax}; {len(lengths)} prompts sent, median "
        f"{statistics.median(lengths):.0f} tokens (before BOS)"
    )
    print(f"{'backend':34} {'job s':>7} {'calls':>6} {'tokens':>8} {'tokens/s':>9} {'model s':>8}")
    for label, recording, seconds in runs:
        tokens = sum(len(p) for p in recording.sent)
        print(
            f"{label:34} {seconds:7.1f} {recording.calls:6d} {tokens:8d} "
            f"{tokens / seconds:9.0f} {recording.seconds:8.1f}"
        )
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    block = int(after.get("block_size", 16))
    # The server puts BOS before every prompt: replay the same, so blocks align as there.
    replay = [[-1, *p] for p in sent]
    ideal = {b: ideal_hit_rate(replay, b) for b in (block, 32, 16, 8, 1)}
    print(
        f"vLLM prefix cache over the job (/metrics): {hits:.0f} of {queries:.0f} prompt tokens "
        f"= {hits / max(queries, 1):.1%} (block size {block}); an unbounded cache on the same "
        f"prompts: {ideal[block]:.1%} at block {block}, {ideal[32]:.1%} at 32, "
        f"{ideal[16]:.1%} at 16, {ideal[8]:.1%} at 8, {ideal[1]:.1%} at 1"
    )
    return 0


def timed_job(
    label: str, backend, task, records, config, job
) -> tuple[str, RecordingBackend, float]:
    """Run the planned job on ``backend``; its wall seconds and the prompts it sent.

    Timed here, not read from the job's stats, which hold no token counts or times (they
    would depend on the private records).
    """
    recording = RecordingBackend(backend)
    start = time.perf_counter()
    synthesize(task, records, config, recording, job=job)
    return label, recording, time.perf_counter() - start


def best_of(repeats: int, call: Callable[[], object]) -> float:
    """The shortest wall time of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def step_batch(backend, task, records, job: SynthesisPlan, seed: int):
    """The first step's teacher prompts and token sets, drawn as ``synthesize`` draws them."""
    rng = make_rng(seed)
    schedule, sizes = job.schedule, job.planned_sizes
    parts = {label: [r for r in records if r.label == label] for label in set(schedule)}
    public = [backend.tokenize(public_prompt(task, label, "")) for label in schedule]
    top = backend.top_k(public, job.config.K)
    batch, sets = [], []
    for label, token_set in zip(schedule, top, strict=True):
        sampling = job.privacy.sampling(sizes[label])
        for group in sampling.draw(len(parts[label]), rng):
            examples = [parts[label][i] for i in group]
            batch.append(backend.tokenize(teacher_prompt(task, examples, label, "")))
            sets.append(token_set)
    return batch, np.array(sets)


def incremental_comparison(
    backend, task, records, config, job, kv_mb: float | None, *, on_first: bool = False
) -> bool:
    """(e): the job with its scope's KV store off, then on; True if the releases match and
    the ratio meets the target."""
    runs = {}
    default = backend.kv_cache_mb
    on_mb = default if kv_mb is None else kv_mb
    # Warm-up (the first forward passes of a process pay one-time costs), then the store on
    # first if asked: a later run is never favoured by the order.
    backend.last_logits(step_batch(backend, task, records, job, 0)[0][:8])
    for mb in (on_mb, 0.0) if on_first else (0.0, on_mb):
        backend.kv_cache_mb = mb
        timed = TimedBackend(backend, count_distinct=True)
        start = time.perf_counter()
        result = synthesize(task, records, config, timed, job=job)
        seconds = time.perf_counter() - start
        runs[mb] = (seconds, timed.scope.diagnostics(), timed.calls, result)
    backend.kv_cache_mb = default
    off, on = runs[0.0], runs[on_mb]
    print(
        f"(e) incremental decoding, task {task.name}, shots {config.shots}, M {config.M}, "
        f"N {config.N}, tmax {config.tmax}: {off[2]} calls, {off[1].sent} prompt tokens sent "
        f"(BOS included), {off[1].distinct} distinct"
    )
    print(f"{'(e) KV store':30} {'job s':>8} {'computed':>9} {'computed/distinct':>18}")
    for mb, (seconds, report, _, _) in sorted(runs.items()):
        label = "off" if not mb else f"on ({mb:g} MB)"
        print(f"{label:30} {seconds:8.2f} {report.computed:9d} {report.ratio:18.2f}")
    same = [d.text for d in off[3].demonstrations] == [d.text for d in on[3].demonstrations]
    met = on[1].ratio <= TARGET_RATIO
    print(
        f"(e) released demonstrations identical with the store off and on: {same}; "
        f"speed-up {off[0] / on[0]:.2f}x; ratio {on[1].ratio:.2f} "
        f"{'meets' if met else 'MISSES'} the {TARGET_RATIO} target"
    )
    return same and met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--task", default="trec")
    parser.add_argument("--data", default=None, help="default: ../shared/data/<task>/train.txt")
    parser.add_argument("--shots", type=int, default=4)
    parser.add_argument("--tmax", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vllm", default=None, help="a vLLM server URL: compare it instead")
    parser.add_argument("--no-local", action="store_true", help="with --vllm: vLLM alone")
    parser.add_argument("--M", type=int, default=None, help="default: the task's paper M")
    parser.add_argument("--N", type=int, default=None, help="default: the task's paper N")
    parser.add_argument(
        "--kv-mb", type=float, default=None, help="(e): the KV store's size (the backend's default)"
    )
    parser.add_argument("--incremental-only", action="store_true", help="run only (e)")
    parser.add_argument("--kv-on-first", action="store_true", help="(e): the store on, then off")
    args = parser.parse_args()

    data = Path(args.data) if args.data else paths(args.task)[0]
    task = get_task(args.task)
    records = load_dataset(task, data)
    config = SynthesisConfig.for_task(
        task.name,
        method=Aggregator.ADADPSYN,
        epsilon=8.0,
        shots=args.shots,
        tmax=args.tmax,
        seed=args.seed,
        M=args.M,
        N=args.N,
    )
    if args.vllm:
        return engine_comparison(args, task, records, config)
    started = time.perf_counter()
    backend = TransformersBackend(args.model)
    print(
        f"model {backend.name} on {backend.device}, {torch.get_num_threads()} threads, "
        f"batch_size {backend.batch_size}, prefix_cache default {backend.prefix_cache}; "
        f"task {task.name}: shots {config.shots}, M {config.M}, N {config.N}, tmax {config.tmax}; "
        f"loaded in {time.perf_counter() - started:.1f} s"
    )
    _ = backend.newline_ids  # a one-time cost of the backend (decodes the vocabulary), not the loop
    # Planning (calibration) happens before the loop: the service does it at admission.
    start = time.perf_counter()
    job = plan_synthesis(task, partition_sizes(task, records), config)
    plan_s = time.perf_counter() - start
    if args.incremental_only:
        ok = incremental_comparison(
            backend, task, records, config, job, args.kv_mb, on_first=args.kv_on_first
        )
        return 0 if ok else 1
    batch, sets = step_batch(backend, task, records, job, args.seed)
    tokens = sum(len(p) for p in batch)  # counted as the generator counts them (no BOS)
    lengths = [len(p) for p in batch]
    backend.last_logits(batch[:4])  # warm-up

    # (a) a real job
    timed = TimedBackend(backend)
    start = time.perf_counter()
    result = synthesize(task, records, config, timed, job=job)
    job_s = time.perf_counter() - start
    job_tps = timed.tokens / job_s
    overhead = 1.0 - timed.seconds / job_s

    # (c) one call for the step versus one call per prompt
    one_s = best_of(args.repeats, lambda: backend.next_token_probs(batch, sets))
    each_s = best_of(
        args.repeats,
        lambda: [backend.next_token_probs([p], s[None]) for p, s in zip(batch, sets, strict=True)],
    )

    # (d) prefix cache and length sorting
    variants = {}
    default = (backend.prefix_cache, backend.sort_by_length)
    for cache, sort in ((False, False), (False, True), (True, True)):
        backend.prefix_cache, backend.sort_by_length = cache, sort
        variants[(cache, sort)] = best_of(args.repeats, lambda: backend.last_logits(batch))
    backend.prefix_cache, backend.sort_by_length = default

    # (b) raw batched forward over one step's prompts, with the backend's own settings
    raw_s = variants.get(default) or best_of(args.repeats, lambda: backend.last_logits(batch))
    raw_tps = tokens / raw_s

    print(
        f"step batch: {len(batch)} prompts, {tokens} tokens "
        f"(lengths {min(lengths)}-{max(lengths)}, median {statistics.median(lengths):.0f})"
    )
    print(f"{'measurement':58} {'seconds':>8} {'tokens/s':>9}")
    rows = [
        (
            f"(a) synthesize: {result.stats['backend_calls']:.0f} calls, {timed.tokens} tokens",
            job_s,
            job_tps,
        ),
        ("(a)   of which inside next_token_probs / top_k", timed.seconds, math.nan),
        ("(a)   planning + calibration, before the job (not counted)", plan_s, math.nan),
        ("(b) one last_logits call over the step batch (default path)", raw_s, raw_tps),
        ("(c) one next_token_probs call for the step batch", one_s, tokens / one_s),
        (f"(c) {len(batch)} next_token_probs calls, one prompt each", each_s, tokens / each_s),
        ("(d) prefix cache off, unsorted (the old path)", variants[(False, False)], math.nan),
        ("(d) prefix cache off, sorted by length", variants[(False, True)], math.nan),
        ("(d) prefix cache on, sorted by length", variants[(True, True)], math.nan),
    ]
    for label, seconds, rate in rows:
        if math.isnan(rate) and label.startswith("(d)"):
            rate = tokens / seconds
        shown = "" if math.isnan(rate) else f"{rate:9.0f}"
        print(f"{label:58} {seconds:8.2f} {shown:>9}")
    print(
        f"loop overhead above the model: {overhead:.1%} of the job "
        f"({job_s - timed.seconds:.2f} s of {job_s:.2f} s); job tokens/s = "
        f"{job_tps / raw_tps:.0%} of raw batched tokens/s"
    )
    print(f"one call per step vs one call per prompt: {each_s / one_s:.2f}x faster")
    plain = variants[(False, True)]
    print(
        f"prefix cache: {tokens / variants[(True, True)]:.0f} vs {tokens / plain:.0f} tokens/s "
        f"({plain / variants[(True, True)]:.2f}x); sorting by length: "
        f"{variants[(False, False)] / plain:.2f}x"
    )
    same = incremental_comparison(
        backend, task, records, config, job, args.kv_mb, on_first=args.kv_on_first
    )
    verdict = "meets" if overhead < TARGET_OVERHEAD else "MISSES"
    print(
        f"verdict: loop overhead {overhead:.1%} {verdict} the {TARGET_OVERHEAD:.0%} target "
        f"(total {time.perf_counter() - started:.0f} s)"
    )
    return 0 if overhead < TARGET_OVERHEAD and same else 1


if __name__ == "__main__":
    sys.exit(main())
