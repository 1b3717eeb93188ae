"""TransformersBackend against direct forward passes of the real default model (gemma-3-270m).

Every expected value is computed here from ``backend.model`` called on ONE unpadded prompt at
a time, so the backend's padding, chunking, length sorting and shared-prefix KV cache must
reproduce the model's own answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from app.synthesis.data import Record
from app.synthesis.prompts import teacher_prompt
from app.synthesis.tasks import BUILTIN_TASKS

TEXTS = [
    "The quick brown fox",
    "In 1492, Columbus sailed across the Atlantic Ocean and reached the islands of the",
    "Question: How far is it from Denver to Aspen?\nAnswer:",
    "A",
    "def add(a, b):\n    return",
]


@pytest.fixture(scope="module")
def backend(gemma):
    """The session's packaged model (tests/conftest.py) where it runs on the CPU."""
    if gemma.device.type == "cpu":
        return gemma
    from app.llm.transformers_backend import TransformersBackend

    return TransformersBackend(device="cpu")


@contextmanager
def settings(backend, **values) -> Iterator[None]:
    """Set backend attributes (prefix_cache, batch_size, ...) for a block, then restore them."""
    old = {key: getattr(backend, key) for key in values}
    for key, value in values.items():
        setattr(backend, key, value)
    try:
        yield
    finally:
        for key, value in old.items():
            setattr(backend, key, value)


#: Direct passes already run, by (model, window, BOS and prompt): several tests check the
#: same prompts against them, and a pass gives the same answer each time it is asked.
DIRECT: dict[tuple[int, object, tuple[int, ...]], torch.Tensor] = {}


@torch.inference_mode()
def direct_logits(backend, prompt: Sequence[int], last: int = 1) -> torch.Tensor:
    """The model's next-token logits for one prompt, BOS first, no padding, no cache; with
    ``last`` > 1, those after each of the prompt's last ``last`` prefixes (rows, in order:
    a causal model's answer at a position depends on the tokens up to it only).

    Only the kept positions go through the output layer (``logits_to_keep``): the full
    vocabulary (262,144 tokens) at every position was most of a long prompt's pass."""
    ids = (backend.tokenizer.bos_token_id, *prompt)
    key = (id(backend.model), getattr(backend.model.config, "sliding_window", None), ids)
    if last > 1 or key not in DIRECT:
        out = backend.model(input_ids=torch.tensor([ids]), logits_to_keep=last)
        logits = out.logits[0].double()
        if last > 1:
            return logits
        DIRECT[key] = logits[-1]
    return DIRECT[key]


#: The plain path's logits already computed, by (model, window, prompts): see plain_logits.
PLAIN: dict[tuple[int, object, tuple[tuple[int, ...], ...]], torch.Tensor] = {}


def plain_logits(backend, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
    """The plain path's last logits for ``prompts`` (no shared-prefix cache, no store; chunks
    of 4, so that length sorting, chunking and restoring the order all run on 10 prompts),
    computed once per prompts and sliding window: several tests compare other paths with it."""
    window = getattr(backend.model.config, "sliding_window", None)
    key = (id(backend.model), window, tuple(tuple(p) for p in prompts))
    if key not in PLAIN:
        with settings(backend, prefix_cache=False, kv_cache_mb=0.0, batch_size=4):
            PLAIN[key] = backend.last_logits(prompts)
    return PLAIN[key]


def probs_among(logits: torch.Tensor, token_sets: np.ndarray) -> np.ndarray:
    """Each row's probabilities renormalised over its token set (next_token_probs' answer)."""
    chosen = torch.gather(logits, 1, torch.as_tensor(token_sets, dtype=torch.long))
    return torch.softmax(chosen.double(), dim=1).numpy()


def teacher_batch(backend) -> list[list[int]]:
    """TREC teacher prompts sharing BOS, the instruction and a first example (~35 tokens)."""
    task = BUILTIN_TASKS["trec"]
    first = Record("What is the name of the longest river in South America ?", "LOC")
    others = [
        Record("Who wrote Hamlet ?", "HUM"),
        Record("How many feet are in a mile ?", "NUM"),
        Record("What does NASA stand for ?", "ABBR"),
        Record("Why is the sky blue during the day but red at sunset ?", "DESC"),
        Record("What kind of animal is a Komodo dragon ?", "ENTY"),
    ]
    prompts = []
    for i, other in enumerate(others):
        for label, generated in (("HUM", ""), ("NUM", " How many")):
            examples = [first, other] if i % 2 else [first]
            prompts.append(backend.tokenize(teacher_prompt(task, examples, label, generated)))
    return prompts


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    n = 0
    while all(len(p) > n and p[n] == prompts[0][n] for p in prompts):
        n += 1
    return n


def test_next_token_probs_equal_a_direct_forward_pass_per_prompt(backend):
    prompts = [backend.tokenize(t) for t in TEXTS]
    assert len({len(p) for p in prompts}) == len(prompts)  # all lengths differ: real padding
    rng = np.random.default_rng(0)
    vocab = backend.model.config.vocab_size
    sets = np.stack([rng.choice(vocab, size=12, replace=False) for _ in prompts])
    sets[:, 0] = [int(direct_logits(backend, p).argmax()) for p in prompts]  # a likely token
    probs = backend.next_token_probs(prompts, sets)
    assert probs.shape == sets.shape
    for prompt, token_set, row in zip(prompts, sets, probs, strict=True):
        chosen = direct_logits(backend, prompt)[torch.as_tensor(token_set)]
        expected = torch.softmax(chosen, dim=0).numpy()
        assert np.allclose(row, expected, atol=1e-5), np.abs(row - expected).max()
    assert np.allclose(probs.sum(axis=1), 1.0)


def test_top_k_matches_torch_topk_of_a_direct_forward_pass(backend):
    prompts = [backend.tokenize(t) for t in TEXTS]
    k = 8
    top = backend.top_k(prompts, k)
    assert top.shape == (len(prompts), k)
    for prompt, ids in zip(prompts, top, strict=True):
        logits = direct_logits(backend, prompt)
        expected = torch.topk(logits, k)
        # Same ranking of values (ids may only differ between exactly tied logits).
        assert np.allclose(logits[torch.as_tensor(ids)].numpy(), expected.values.numpy(), atol=1e-4)
        assert ids[0] == int(expected.indices[0])


def test_prefix_cache_gives_the_same_probabilities_as_the_plain_path(backend):
    prompts = teacher_batch(backend)
    lengths = sorted(len(p) for p in prompts)
    assert shared_prefix(prompts) >= 30 and lengths[0] < lengths[-1]
    rng = np.random.default_rng(1)
    vocab = backend.model.config.vocab_size
    sets = np.stack([rng.choice(vocab, 50, replace=False) for _ in prompts])
    # Chunks of 4 over 10 prompts: length sorting, chunking and restoring the order all run.
    logits = plain_logits(backend, prompts).clone()
    plain = probs_among(logits, sets)
    logits[:, backend.non_text_ids] = -torch.inf  # top_k offers text tokens only
    plain_top = logits.argmax(dim=1).numpy()
    with settings(backend, prefix_cache=True, batch_size=4):
        before = backend.tokens_computed
        cached = backend.next_token_probs(prompts, sets)
        computed = backend.tokens_computed - before
        cached_top = backend.top_k(prompts, 5)
    # The cached path ran: the shared prefix went through the model once, not once a prompt.
    assert computed < sum(len(p) + 1 for p in prompts) - shared_prefix(prompts)
    assert np.allclose(cached, plain, atol=1e-4), np.abs(cached - plain).max()
    assert (cached_top[:, 0] == plain_top).all()
    # And both equal the model on each prompt alone.
    for prompt, token_set, row in zip(prompts[:3], sets[:3], cached[:3], strict=True):
        chosen = direct_logits(backend, prompt)[torch.as_tensor(token_set)]
        assert np.allclose(row, torch.softmax(chosen, dim=0).numpy(), atol=1e-4)


def test_prefix_cache_steps_aside_when_prompts_reach_the_sliding_window(backend, monkeypatch):
    # Padding sits between the prefix and the suffixes; a sliding-window mask counts cache
    # slots, so the cache is only exact while every prompt fits in the window.
    prompts = teacher_batch(backend)
    window = max(len(p) for p in prompts) - 5  # the longest prompts exceed it
    monkeypatch.setattr(backend.model.config, "sliding_window", window)
    sets = np.tile(np.arange(100, 140), (len(prompts), 1))
    plain = probs_among(plain_logits(backend, prompts), sets)
    with settings(backend, prefix_cache=True):
        before = backend.tokens_computed
        cached = backend.next_token_probs(prompts, sets)
        assert backend.tokens_computed - before == sum(len(p) + 1 for p in prompts)
    assert np.allclose(cached, plain, atol=1e-4)


def test_newline_and_eos_ids_come_from_the_tokenizer(backend):
    newline = backend.tokenizer("\n", add_special_tokens=False).input_ids
    assert len(newline) == 1 and newline[0] in backend.newline_ids
    assert backend.eos_id == backend.tokenizer.eos_token_id
    assert backend.eos_id not in backend.newline_ids
    assert all("\n" in backend.tokenizer.decode([i]) for i in backend.newline_ids)


def test_tokenize_detokenize_round_trip(backend):
    for text in ["Who painted the Mona Lisa?", "Two lines\nof plain text, 42 words.", " lead"]:
        ids = backend.tokenize(text)
        assert ids and backend.tokenizer.bos_token_id not in ids
        assert backend.detokenize(ids) == text


def test_dtype_names_resolve_and_bad_names_are_refused():
    from app.llm.transformers_backend import _cpu_has_native_bf16, resolve_dtype

    cpu = torch.device("cpu")
    assert resolve_dtype("float32", cpu) is torch.float32
    assert resolve_dtype("bfloat16", cpu) is torch.bfloat16
    expected = torch.bfloat16 if _cpu_has_native_bf16() else torch.float32
    assert resolve_dtype("auto", cpu) is expected
    with pytest.raises(ValueError, match="auto, float32 or bfloat16"):
        resolve_dtype("fp8", cpu)


def test_bfloat16_backend_agrees_with_float32(backend):
    """The auto precision on bf16-capable CPUs: same ranking, probabilities within 0.1.

    bfloat16 keeps 8 bits of mantissa: a logit near 20 moves by up to about 0.08, and over
    five renormalised candidates that moves a probability by a few hundredths (0.05 seen)."""
    from app.llm.transformers_backend import TransformersBackend

    half = TransformersBackend(device="cpu", dtype="bfloat16")
    assert half.dtype is torch.bfloat16 and backend.dtype is torch.float32
    prompts = [backend.tokenize(t) for t in TEXTS]
    sets = np.asarray(backend.top_k(prompts, 5))
    top = sets[:, :1]  # the float32 model's first choice
    full = backend.next_token_probs(prompts, sets)
    low = half.next_token_probs(prompts, sets)
    assert np.abs(full - low).max() < 0.1
    assert (half.top_k(prompts, 1) == top).mean() >= 0.8


def test_chunks_keep_order_batch_size_and_bounded_padding(backend):
    seqs = [[1] * n for n in [10] * 20 + [12, 400, 11]]
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    with settings(backend, batch_size=8):
        chunks = backend._chunks(order, seqs)
    assert [i for chunk in chunks for i in chunk] == order
    assert all(1 <= len(chunk) <= 8 for chunk in chunks)
    assert chunks[-1] == [21]  # the 400-token prompt does not pad the short ones
    for chunk in chunks:
        real = sum(len(seqs[i]) for i in chunk)
        assert len(chunk) * max(len(seqs[i]) for i in chunk) <= 1.25 * real
    with settings(backend, sort_by_length=False, batch_size=8):
        assert backend._chunks(list(range(23)), seqs) == [
            list(range(0, 8)), list(range(8, 16)), list(range(16, 23))
        ]  # fmt: skip


def test_kv_scope_extends_each_prompt_by_its_new_tokens_only(backend):
    # Incremental decoding: a prompt one token longer than a stored one runs that token
    # alone, on top of the stored KV cache, and the answers equal the plain path's.
    prompts = teacher_batch(backend)
    rng = np.random.default_rng(2)
    vocab = backend.model.config.vocab_size
    sets = np.stack([rng.choice(vocab, 50, replace=False) for _ in prompts])
    longer = [[*p, int(s[0])] for p, s in zip(prompts, sets, strict=True)]
    plain = probs_among(plain_logits(backend, prompts), sets)
    plain_longer = probs_among(plain_logits(backend, longer), sets)
    with settings(backend, kv_cache_mb=64.0, batch_size=4), backend.kv_scope() as scope:
        first = scope.next_token_probs(prompts, sets)
        first_computed = scope.tokens_computed
        second = scope.next_token_probs(longer, sets)
        second_computed = scope.tokens_computed - first_computed
        assert scope.store_bytes > 0
    assert scope.closed and scope.store_bytes == 0  # freed at the end of the block
    assert np.allclose(first, plain, atol=1e-5), np.abs(first - plain).max()
    assert np.allclose(second, plain_longer, atol=1e-5), np.abs(second - plain_longer).max()
    # First call: the shared prefix once, then each prompt's own tokens (BOS included).
    shared = shared_prefix(prompts) + 1
    assert first_computed == shared + sum(len(p) + 1 - shared for p in prompts)
    assert second_computed == len(prompts)  # one new token per prompt
    for prompt, token_set, row in zip(longer[:3], sets[:3], second[:3], strict=True):
        chosen = direct_logits(backend, prompt)[torch.as_tensor(token_set)]
        assert np.allclose(row, torch.softmax(chosen, dim=0).numpy(), atol=1e-5)


def full_cost(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens a batch computes with no stored cache: BOS and the shared prefix once, then each
    prompt's own tokens (the shared-prefix cache of one call)."""
    shared = shared_prefix(prompts)
    return shared + 1 + sum(len(p) - shared for p in prompts)


def test_incremental_decoding_is_on_by_default_and_only_inside_a_scope(backend):
    from app.llm.transformers_backend import DEFAULT_KV_CACHE_MB

    assert backend.kv_cache_mb == DEFAULT_KV_CACHE_MB > 0
    prompts = teacher_batch(backend)[:4]  # one and two examples, two labels: enough to count
    longer = [[*p, 100] for p in prompts]
    backend.top_k(prompts, 3)
    before = backend.tokens_computed
    backend.top_k(longer, 3)  # outside a scope nothing was kept: the prompts run again
    assert backend.tokens_computed - before == full_cost(longer)
    with backend.kv_scope() as scope:
        scope.top_k(prompts, 3)
        scope.top_k(longer, 3)
        assert scope.tokens_computed == full_cost(prompts) + len(longer)
    with settings(backend, kv_cache_mb=0.0), backend.kv_scope() as off:
        off.top_k(prompts, 3)
        off.top_k(longer, 3)  # a scope without a budget counts, and stores nothing
        assert off.store_bytes == 0
        assert off.tokens_computed == full_cost(prompts) + full_cost(longer)


def test_two_scopes_on_one_backend_never_see_each_others_caches(backend):
    # Two jobs interleaved on one backend: each computes exactly what it computes alone,
    # and a prompt extending the other scope's stored prompt is computed in full.
    prompts = teacher_batch(backend)
    a_calls = [prompts[:5], [[*p, 7] for p in prompts[:5]]]
    b_calls = [[[*p, 7] for p in prompts[:5]], [[*p, 7, 9] for p in prompts[:5]]]
    sets = np.tile(np.arange(200, 230), (5, 1))

    def alone(calls):
        with backend.kv_scope() as scope:
            answers = [scope.next_token_probs(c, sets) for c in calls]
        return answers, scope.tokens_computed

    a_alone, a_computed = alone(a_calls)
    b_alone, b_computed = alone(b_calls)
    with backend.kv_scope() as a, backend.kv_scope() as b:
        a_first = a.next_token_probs(a_calls[0], sets)
        b_first = b.next_token_probs(b_calls[0], sets)  # extends a's prompts: not reused
        assert b.tokens_computed == full_cost(b_calls[0])
        a_second = a.next_token_probs(a_calls[1], sets)
        b_second = b.next_token_probs(b_calls[1], sets)
        assert a.tokens_computed == a_computed and b.tokens_computed == b_computed
    for together, lone in zip(
        [a_first, a_second, b_first, b_second], [*a_alone, *b_alone], strict=True
    ):
        assert np.allclose(together, lone, atol=1e-6)
    assert a.store_bytes == b.store_bytes == 0


class Flaky:
    """The model, failing its ``fail_at``-th forward pass with a transient error."""

    def __init__(self, model, fail_at: int) -> None:
        self.model, self.fail_at, self.calls = model, fail_at, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, *args, **kwargs):
        from app.llm.base import TransientBackendError

        self.calls += 1
        if self.calls == self.fail_at:
            raise TransientBackendError("model failed half-way")
        return self.model(*args, **kwargs)


def test_retry_layer_passes_the_scope_through_and_a_retry_recomputes(backend, monkeypatch):
    from app.llm.retry import RetryingBackend, RetryPolicy

    prompts = teacher_batch(backend)
    longer = [[*p, 11] for p in prompts]
    sets = np.tile(np.arange(300, 340), (len(prompts), 1))
    with settings(backend, prefix_cache=False, kv_cache_mb=0.0):
        plain_longer = backend.next_token_probs(longer, sets)
    retrying = RetryingBackend(backend, retry=RetryPolicy(retries=2, sleep=lambda _s: None))
    with settings(backend, batch_size=4), retrying.kv_scope() as scoped:
        assert isinstance(scoped, RetryingBackend)
        scope = scoped._backend  # the KVScope inside the retry layer
        assert scope is not backend and scope.name == backend.name
        scoped.next_token_probs(prompts, sets)
        assert scope.store_bytes > 0
        # The second call fails in its second chunk, after its first chunk stored rows.
        flaky = Flaky(backend.model, fail_at=2)
        monkeypatch.setattr(backend, "model", flaky)
        before = scope.tokens_computed
        answers = scoped.next_token_probs(longer, sets)
        assert flaky.calls >= 3  # failed once, then retried
        # The retry started from an empty store: every prompt ran again (shared prefix once),
        # where the cached path would have run one token per prompt.
        assert scope.tokens_computed - before > full_cost(longer)
        monkeypatch.setattr(backend, "model", flaky.model)
    assert scope.closed and scope.store_bytes == 0
    assert np.allclose(answers, plain_longer, atol=1e-5), np.abs(answers - plain_longer).max()


def test_kv_store_is_bounded_and_steps_aside_at_the_window(backend, monkeypatch):
    prompts = teacher_batch(backend)
    sets = np.tile(np.arange(100, 140), (len(prompts), 1))
    plain = probs_among(plain_logits(backend, prompts), sets)
    with settings(backend, kv_cache_mb=5.0):  # room for 2-3 prompts (~37 kB a token)
        with backend.kv_scope() as scope:
            small = scope.next_token_probs(prompts, sets)
            assert 0 < scope.store_bytes <= 5 * 2**20
        window = max(len(p) for p in prompts) - 5  # the longest prompts exceed it
        monkeypatch.setattr(backend.model.config, "sliding_window", window)
        with backend.kv_scope() as scope:
            narrow = scope.next_token_probs(prompts, sets)
            # The prompts reaching the window ran whole, on the plain path.
            assert scope.tokens_computed > sum(len(p) + 1 for p in prompts) // 2
        plain_narrow = probs_among(plain_logits(backend, prompts), sets)
    assert np.allclose(small, plain, atol=1e-5)
    assert np.allclose(narrow, plain_narrow, atol=1e-5), np.abs(narrow - plain_narrow).max()


def test_kv_store_evicts_the_least_recently_used_within_its_budget():
    from app.llm.transformers_backend import KVStore

    def entry(tokens: int):  # one layer, 1 head, 4 dims, float32: 32 bytes a token
        return [(torch.zeros(1, tokens, 4), torch.zeros(1, tokens, 4))]

    store = KVStore(budget=32 * 10)
    store.put([1, 2, 3], entry(3))
    store.put([5, 6, 7], entry(3))
    assert store.longest([1, 2, 3, 4])[0] == 3  # touched: [5, 6, 7] is now the oldest
    store.put([8, 9, 10, 11, 12], entry(5))  # 11 tokens > the budget's 10: one must go
    assert store.bytes == 32 * 8 and len(store) == 2
    assert store.longest([5, 6, 7, 1]) == (0, None)
    assert store.longest([1, 2, 3, 4])[0] == 3 and store.longest([8, 9, 10, 11, 12, 0])[0] == 5
    store.put(list(range(20)), entry(20))  # larger than the budget: not stored, nothing evicted
    assert len(store) == 2
    store.clear()
    assert store.bytes == 0 and store.longest([1, 2, 3, 4]) == (0, None)


def test_kv_scope_counts_distinct_tokens_for_diagnostics(backend):
    prompts = [[5, 6, 7], [5, 6, 8], [5, 6, 7, 9]]
    with backend.kv_scope(count_distinct=True) as scope:
        scope.top_k(prompts[:2], 2)
        scope.top_k(prompts[2:], 2)
        report = scope.diagnostics()
    # BOS 5 6 7 8 9: six trie nodes; 4 + 4 + 5 tokens sent (BOS included).
    assert report.distinct == 6 and report.sent == 13
    assert report.computed == scope.tokens_computed and report.ratio == report.computed / 6


def test_one_prompt_past_the_sliding_window_is_read_once_and_extended_by_its_new_tokens(backend):
    # An answer's prompt past Gemma's 512-slot window: the store cannot keep a sliding
    # layer's slots there, so every answer token used to rerun the whole prompt (2.3 s a
    # token at 1,678 tokens). The scope's stream reads the prompt in pieces, then one token
    # at a time, and each step answers as a direct pass over the whole sequence does.
    window = backend.model.config.sliding_window
    words = " ".join(f"item {i} is {TEXTS[i % len(TEXTS)]}" for i in range(200))
    prompt = backend.tokenize(words)[: window + 150]
    steps = 3
    with backend.kv_scope() as scope:
        for end in range(128, len(prompt), 128):
            scope.top_k([prompt[:end]], 1)
        seq, answers = list(prompt), []
        for _ in range(steps):
            answers.append(scope.last_logits([seq])[0].double())
            seq.append(int(answers[-1].argmax()))
        again = scope.last_logits([seq[:-1]])[0].double()  # the same sequence: no new pass
        assert scope.tokens_computed == len(seq)  # BOS and each token once, the last not yet
    assert torch.allclose(again, answers[-1])
    # One direct pass over the whole final sequence answers every step's prefix.
    direct = direct_logits(backend, seq[:-1], last=steps)
    for step, (ours, expected) in enumerate(zip(answers, direct, strict=True)):
        assert torch.allclose(ours, expected, atol=2e-3), step
