"""Local backend: a transformers causal LM on CPU or GPU.

Batches are left-padded so that every prompt's next token is predicted at the last position,
and only that position's logits are computed (``logits_to_keep=1``). Prompts are sorted by
length and processed in chunks of ``batch_size`` (less padding), and the answers are put back
in the caller's order.

With ``prefix_cache=True``, the longest token prefix shared by all prompts of a batch (in the
synthesis loop: BOS, the instruction and the first label field) is run once, and every chunk
runs only its suffixes on top of that prefix's KV cache. The suffixes are left-padded *between*
the prefix and the suffix (the padding is masked out and the position ids skip it), so the
next token is still predicted at the last position.

Incremental decoding: inside a job's :meth:`TransformersBackend.kv_scope`, the
backend also keeps the KV cache of every prompt it answered, in a least-recently-used store
bounded in bytes (``kv_cache_mb``, default ``DEFAULT_KV_CACHE_MB``) and keyed by token ids.
A later prompt that starts with a stored prompt (the same prompt one token longer, the shared
instruction, a public prompt growing by the released token) runs only its new tokens on top of
that stored cache; the extensions of one batch run together, each row left-padded inside the
cache and between cache and new tokens (masked, position ids skip the padding). Each scope has
its own store, emptied when the scope ends and whenever a call in it raises (a retry then
recomputes from scratch): no job reads or evicts another job's caches, and no job runs faster
because of another's (private) prompts. Calls outside a scope (``/complete``, PromptPATE,
PromptDPSGD) take the plain path and store nothing.
"""

from __future__ import annotations

import inspect
import logging
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    PreTrainedTokenizerBase,
)

from app.llm.base import DEFAULT_KV_CACHE_MB, BackendError, SameTokenizer
from app.llm.conversion import ensure_converted
from app.llm.models import DEFAULT_MODEL, ModelSource, resolve
from app.llm.text import is_text_piece

log = logging.getLogger(__name__)

MIN_PREFIX = 8  # shortest shared prefix (tokens, BOS included) worth a separate pass
Layers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX); Linux only."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return False
    return any(flag in flags.split() for flag in ("avx512_bf16", "amx_bf16"))


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``"float32"``, ``"bfloat16"``, or ``"auto"``: bfloat16 where the hardware computes it
    natively (a CUDA GPU that supports it, a CPU with AVX512-BF16/AMX), float32 elsewhere.

    Why auto prefers bfloat16: on this project's 2-core AMD EPYC (AVX512-BF16) a TREC step of
    20 teacher prompts takes 0.84 s instead of 1.70 s in float32, and the next-token
    probabilities move by at most 0.012 (the shipped weights are 4-bit quantised already).
    """
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if _cpu_has_native_bf16() else torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype must be auto, {' or '.join(DTYPES)}, got {name!r}")
    return DTYPES[name]


def _load(source: ModelSource, dtype: torch.dtype):
    """Load a model and tokenizer, converting a GGUF once and caching the result
    (:func:`app.llm.conversion.ensure_converted`: safe when several processes start at once)."""
    if source.folder is not None:
        folder = source.folder
    else:
        assert source.gguf is not None
        folder = ensure_converted(source.gguf, source.converted)
    return (
        AutoModelForCausalLM.from_pretrained(folder, dtype=dtype),
        AutoTokenizer.from_pretrained(folder),
    )


def model_folder(model: str = DEFAULT_MODEL) -> Path:
    """The transformers folder of a model setting, converting a packaged GGUF once.

    A vLLM server loads weights from a folder, not from our packages: ``scripts/vllm_serve.sh``
    asks for this one, so that vLLM and the local backend serve the very same weights.
    """
    source = resolve(model)
    if source.folder is not None:
        return source.folder
    assert source.gguf is not None
    return ensure_converted(source.gguf, source.converted)


class LastLogitsAnswers(ABC):
    """``next_token_probs`` and ``top_k`` from a backend's last-position logits: shared by
    :class:`TransformersBackend` and the soft-prompted wrapper
    (:class:`app.promptdpsgd.backend.SoftPromptedBackend`), which differ only in how they
    compute those logits."""

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def last_logits(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """B x vocabulary float32 logits of each prompt's next token, in the caller's order."""

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        token_sets = np.asarray(token_sets)
        if token_sets.ndim != 2 or token_sets.shape[0] != len(prompts):
            raise BackendError(
                f"{self.name}: token_sets must be B x K with B = {len(prompts)}, "
                f"got shape {token_sets.shape}"
            )
        logits = self.last_logits(prompts)
        chosen = torch.gather(logits, 1, torch.as_tensor(token_sets, dtype=torch.long))
        return torch.softmax(chosen.double(), dim=1).numpy()

    @property
    def non_text_ids(self) -> torch.Tensor:
        """Token ids never offered by :meth:`top_k` (none by default; see
        :func:`non_text_token_ids`)."""
        return torch.zeros(0, dtype=torch.long)

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        """The ``k`` most probable next tokens that are text (:attr:`non_text_ids` left out):
        the candidate vocabulary of every generated demonstration and answer."""
        logits = self.last_logits(prompts)
        excluded = self.non_text_ids
        if excluded.numel():
            logits = logits.clone()
            logits[:, excluded] = -torch.inf
        return logits.topk(k, dim=1).indices.numpy()


# A whole token that is an angle-bracketed or square-bracketed name (<start_of_image>,
# <unused12>, <|im_start|>, [multimodal]): a control token of some chat or vision template,
# whether or not the converted tokenizer marks it special. Byte tokens (<0x0A>) are text.
def non_text_token_ids(tokenizer: PreTrainedTokenizerBase, keep: frozenset[int]) -> list[int]:
    """The ids of a tokenizer's tokens that are not text: its special and added tokens,
    and pieces that are not text (:func:`app.llm.text.is_text_piece`), except ``keep``
    (end-of-sequence and newlines, which end a demonstration or an answer). A public
    function of the tokenizer: leaving these out of the candidate vocabulary is
    post-processing of public data, at no privacy cost."""
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return sorted(
        i
        for i, piece in enumerate(pieces)
        if i not in keep and (i in special or not is_text_piece(piece))
    )


class TransformersBackend(LastLogitsAnswers):
    """Next-token distributions from a local transformers model.

    ``prefix_cache``: run the prefix shared by all prompts of a batch once and reuse its KV
    cache for every chunk (see the module docstring). The answers equal those of the plain
    path up to float rounding (``tests/llm/test_transformers_backend.py``). It is used only
    when the shared prefix has at least ``MIN_PREFIX`` tokens, every prompt has a token after
    it, and every prompt fits in the model's sliding window, if it has one (its mask counts
    cache slots, padding included, so beyond the window the cached path would differ);
    otherwise the plain path runs.

    ``sort_by_length``: chunk the prompts in order of length (less padding); the answers come
    back in the caller's order.

    Measured with ``bench/synthesis_throughput.py`` (gemma-3-270m, float32, CPU, 2 threads
    on a shared machine, best of 3): one TREC step batch of 4 shots x M = 20 teacher prompts,
    23-124 tokens, 4,941 in all, sharing a 20-token prefix (BOS, instruction, first label
    field). ``last_logits`` over it took 12.17 s unsorted without the cache (the former path),
    7.01 s sorted (705 tokens/s) and 5.13 s sorted with the prefix cache (962 tokens/s): the
    cache is 1.37x faster, sorting 1.74x. A second, busier run gave 1.31x (245 vs 186
    tokens/s) and 1.40x. Hence both default to on.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        device: str | None = None,
        batch_size: int = 32,
        dtype: torch.dtype | str = torch.float32,
        prefix_cache: bool = True,
        sort_by_length: bool = True,
        kv_cache_mb: float = DEFAULT_KV_CACHE_MB,
    ) -> None:
        source = resolve(model)
        self._name = source.key
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.batch_size = batch_size
        self.prefix_cache = prefix_cache
        self.sort_by_length = sort_by_length
        if isinstance(dtype, str):
            dtype = resolve_dtype(dtype, self.device)
        self.dtype = dtype
        self.model, self.tokenizer = _load(source, dtype)
        self.model.to(self.device).eval()
        # transformers 5 renamed ``past_key_values`` to ``cache``.
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.tokens_processed = 0  # prompt tokens answered (BOS included), for throughput stats
        self.tokens_computed = 0  # tokens actually run through the model (a cached prefix once)
        # Each kv_scope's store budget; 0 turns incremental decoding off (scopes then take
        # the plain path and only count tokens).
        self.kv_cache_mb = kv_cache_mb

    @property
    def name(self) -> str:
        return self._name

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @cached_property
    def newline_ids(self) -> frozenset[int]:
        tok: PreTrainedTokenizerBase = self.tokenizer
        pieces = tok.convert_ids_to_tokens(list(range(len(tok))))
        marked = [i for i, p in enumerate(pieces) if p and ("\n" in p or "Ċ" in p or p == "<0x0A>")]
        return frozenset(i for i in marked if "\n" in tok.decode([i]))

    @cached_property
    def non_text_ids(self) -> torch.Tensor:
        keep = frozenset({self.eos_id, *self.newline_ids})
        return torch.tensor(non_text_token_ids(self.tokenizer, keep), dtype=torch.long)

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _with_bos(self, prompt: Sequence[int]) -> list[int]:
        bos = self.tokenizer.bos_token_id
        if bos is None or (prompt and prompt[0] == bos):
            return list(prompt)
        return [bos, *prompt]

    @property
    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return self.eos_id if pad is None else int(pad)

    def kv_scope(self, *, count_distinct: bool = False) -> AbstractContextManager[KVScope]:
        """A job's view of this backend with its own KV store (incremental decoding), freed
        when the block ends, whether it ends normally or by an exception (failure, cancel).

        ``count_distinct``: also count the distinct tokens of the prompts sent (a token trie,
        for benchmarks: see :meth:`KVScope.diagnostics`)."""
        return _scoped(KVScope(self, self.kv_cache_mb, count_distinct=count_distinct))

    def _sequences(self, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
        """``prompts`` with BOS first; a clear error for an empty batch or prompt."""
        if not prompts:
            raise BackendError(f"{self.name}: empty batch")
        seqs = [self._with_bos(p) for p in prompts]
        if any(not s for s in seqs):
            raise BackendError(f"{self.name}: empty prompt in a model without a BOS token")
        return seqs

    @torch.inference_mode()
    def last_logits(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Logits of the next token after each prompt (B x vocabulary), in chunks. Nothing is
        kept between calls here; incremental decoding runs inside :meth:`kv_scope` only."""
        seqs = self._sequences(prompts)
        self.tokens_processed += sum(len(s) for s in seqs)
        return self._batched_logits(seqs)

    def _batched_logits(self, seqs: list[list[int]]) -> torch.Tensor:
        """The plain path (with the shared-prefix cache when on), in the caller's order."""
        order = list(range(len(seqs)))
        if self.sort_by_length:
            order.sort(key=lambda i: len(seqs[i]))
        prefix = self._cached_prefix(seqs) if self.prefix_cache else None
        out = []
        for indices in self._chunks(order, seqs):
            chunk = [seqs[i] for i in indices]
            if prefix is None:
                out.append(self._plain_logits(chunk))
            else:
                out.append(self._suffix_logits(chunk, *prefix))
        logits = torch.cat(out)
        if self.sort_by_length:
            inverse = torch.empty(len(order), dtype=torch.long)
            inverse[torch.as_tensor(order)] = torch.arange(len(order))
            logits = logits[inverse]
        return logits

    def _chunks(self, order: list[int], seqs: list[list[int]]) -> list[list[int]]:
        """Split ``order`` into chunks of at most ``batch_size`` prompts.

        With length sorting, a chunk also closes before padding would exceed a quarter of
        its real tokens: a few long prompts (AG News items run from 20 to 400 tokens) would
        otherwise make every short prompt of their chunk pay their length. Measured on an
        AG News step of 24 prompts: 3,083 real tokens, padded to 24 x 371 = 8,904 in one chunk.
        """
        if not self.sort_by_length:
            return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        chunks: list[list[int]] = []
        current: list[int] = []
        real = 0
        for i in order:  # ascending length: the newest prompt is the chunk's longest
            size = len(seqs[i])
            full = len(current) >= self.batch_size
            if current and (full or (len(current) + 1) * size > 1.25 * (real + size)):
                chunks.append(current)
                current, real = [], 0
            current.append(i)
            real += size
        chunks.append(current)
        return chunks

    def _plain_logits(self, chunk: list[list[int]]) -> torch.Tensor:
        """One left-padded forward pass over whole prompts."""
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, prompt in enumerate(chunk):
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        logits = self._forward(ids, mask, positions)
        self.tokens_computed += int(mask.sum())
        return logits.float().cpu()

    def _cached_prefix(
        self, seqs: list[list[int]]
    ) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]]] | None:
        """The shared prefix's length and per-layer (keys, values), or None if not worth it."""
        if len(seqs) < 2:
            return None
        shortest = min(len(s) for s in seqs)
        length = 0
        first = seqs[0]
        # Every prompt keeps at least one token after the prefix: its last logits come from there.
        while length < shortest - 1 and all(s[length] == first[length] for s in seqs):
            length += 1
        if length < MIN_PREFIX:
            return None
        window = getattr(self.model.config, "sliding_window", None)
        longest = max(len(s) for s in seqs)
        if window is not None and longest > window:
            # Suffix padding sits between prefix and suffix, and the sliding-window mask counts
            # cache slots, not positions: only exact while no prompt reaches the window.
            return None
        cache = DynamicCache(config=self.model.config)
        self.model(
            input_ids=torch.tensor([first[:length]], device=self.device),
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_arg: cache},
        )
        self.tokens_computed += length
        layers = _cache_layers(cache, length, rows=1)
        return None if layers is None else (length, layers)

    def _suffix_logits(
        self, chunk: list[list[int]], length: int, layers: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """One forward pass over the suffixes of ``chunk``, on top of the shared prefix."""
        rows = len(chunk)
        suffixes = [p[length:] for p in chunk]
        width = max(len(s) for s in suffixes)
        ids = torch.full((rows, width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((rows, length + width), dtype=torch.long)
        mask[:, :length] = 1
        for row, suffix in enumerate(suffixes):
            ids[row, width - len(suffix) :] = torch.tensor(suffix)
            mask[row, length + width - len(suffix) :] = 1
        # Positions continue after the prefix and skip the padding (pads get any position).
        positions = length + (mask[:, length:].cumsum(dim=1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        for index, (keys, values) in enumerate(layers):
            cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), index)
        logits = self._forward(ids, mask, positions, cache)
        self.tokens_computed += int(mask[:, length:].sum())
        return logits.float().cpu()

    def _forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: DynamicCache | None = None,
    ) -> torch.Tensor:
        """Last-position logits of ``ids``, on top of ``cache`` if given (the pass extends
        it) or from scratch: the one forward call of the plain, shared-prefix and KV-store
        paths, so that all three ask the model the same way."""
        extra = {} if cache is None else {self._cache_arg: cache}
        return self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=cache is not None,
            logits_to_keep=1,
            **extra,
        ).logits[:, -1, :]

    def _fits_window(self, slots: int) -> bool:
        """Whether ``slots`` cache slots (padding included) stay exact under the model's
        sliding window: a sliding layer keeps only its last ``window - 1`` slots, and its mask
        counts slots, not positions."""
        window = getattr(self.model.config, "sliding_window", None)
        return window is None or slots <= window - 1

    def _incremental_logits(self, seqs: list[list[int]], store: KVStore) -> torch.Tensor:
        """Last logits of ``seqs`` (caller's order), each prompt run only from the end of its
        longest prefix in ``store``; every prompt computed here is stored for later calls."""
        if self.prefix_cache and len(seqs) > 1:
            shared = _shared_length(seqs)
            if shared >= MIN_PREFIX and store.longest(seqs[0][: shared + 1])[0] < shared:
                self._extend([seqs[0][:shared]], [store.longest(seqs[0][:shared])], store)
        found = [store.longest(s) for s in seqs]
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]) - found[i][0])
        news = [s[found[i][0] :] for i, s in enumerate(seqs)]
        rows: list[int] = []
        parts = []
        for chunk in self._chunks(order, news):
            parts.append(self._extend([seqs[i] for i in chunk], [found[i] for i in chunk], store))
            rows.extend(chunk)
        out = torch.cat(parts)
        inverse = torch.empty(len(rows), dtype=torch.long)
        inverse[torch.as_tensor(rows)] = torch.arange(len(rows))
        return out[inverse]

    def _extend(
        self, chunk: list[list[int]], found: list[tuple[int, Layers | None]], store: KVStore
    ) -> torch.Tensor:
        """One forward pass over the new tokens of ``chunk`` on top of each row's stored
        prefix (``found``: its length and layers); stores every row's full cache."""
        past = [length for length, _ in found]
        news = [seq[length:] for seq, length in zip(chunk, past, strict=True)]
        rows, width, span = len(chunk), max(len(n) for n in news), max(past)
        if not self._fits_window(span + width):
            return self._plain_logits(chunk)
        ids = torch.full((rows, width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((rows, span + width), dtype=torch.long)
        for row, (length, new) in enumerate(zip(past, news, strict=True)):
            ids[row, width - len(new) :] = torch.tensor(new)
            mask[row, span - length : span] = 1
            mask[row, span + width - len(new) :] = 1
        positions = torch.as_tensor(past)[:, None] + (mask[:, span:].cumsum(dim=1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        if span:
            for index, (keys, values) in enumerate(_padded_layers(found, span)):
                cache.update(keys.to(self.device), values.to(self.device), index)
        logits = self._forward(ids, mask, positions, cache)
        self.tokens_computed += sum(len(n) for n in news)
        _keep(store, chunk, mask, cache)
        return logits.float().cpu()


def _cache_layers(cache: DynamicCache, slots: int, rows: int | None = None) -> Layers | None:
    """Each layer's (keys, values) of ``cache`` if all are 4-D tensors of ``slots`` slots
    (and ``rows`` rows, if given); None for a cache layout the KV paths do not know (hybrid,
    linear, ...), which then run without it."""
    layers: Layers = []
    for layer in cache.layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not (
            isinstance(keys, torch.Tensor)
            and isinstance(values, torch.Tensor)
            and keys.ndim == 4
            and (rows is None or keys.shape[0] == rows)
            and keys.shape[-2] == slots
        ):
            return None
        layers.append((keys, values))
    return layers


def _keep(store: KVStore, chunk: list[list[int]], mask: torch.Tensor, cache: DynamicCache) -> None:
    """Store each row's own slots of the batch cache under its token ids."""
    layers = _cache_layers(cache, mask.shape[1])
    if layers is None:
        return  # a cache layout this path does not know: nothing stored
    for row, seq in enumerate(chunk):
        slots = mask[row].nonzero().squeeze(1).to(layers[0][0].device)
        own = [(k[row].index_select(1, slots), v[row].index_select(1, slots)) for k, v in layers]
        store.put(seq, own)


@contextmanager
def _scoped(scope: KVScope) -> Iterator[KVScope]:
    """Yield ``scope``, then free its store however the block ends."""
    try:
        yield scope
    finally:
        scope.close()


@dataclass(frozen=True)
class KVDiagnostics:
    """What one scope computed, for benchmarks and tests only.

    Token counts depend on the lengths of the private records sampled into teacher prompts,
    with no noise: they must never reach a job's stats, a response, a log line or a CLI file.
    ``distinct`` is the number of nodes of the token trie of the prompts sent (BOS first):
    each distinct prefix once, what a perfect cache would compute (None unless counted).
    """

    sent: int  # prompt tokens answered, BOS included
    computed: int  # tokens run through the model
    distinct: int | None

    @property
    def ratio(self) -> float | None:
        """``computed / distinct``: 1.0 is every distinct token computed once."""
        return self.computed / self.distinct if self.distinct else None


class KVScope(SameTokenizer, LastLogitsAnswers):
    """One job's view of a :class:`TransformersBackend`: the same model, answers equal to the
    backend's own up to float rounding, and a KV store of its own (incremental decoding).

    Why a view per job rather than one store per backend: a worker process shares one backend
    between jobs (and ``/complete``), so a shared store would let one job evict or extend
    another's caches and run faster because of another's private prompts. A scope's store is
    freed by ``close`` (the ``kv_scope`` block's end) and whenever a call raises: a call that
    failed half-way may have stored some rows, and the retry layer (:mod:`app.llm.retry`)
    then asks again, which recomputes from scratch.

    Calls are serialised by the caller as for the backend (the provider's lock); the scope's
    token counts are the backend's counter's growth over its own calls.
    """

    _backend: TransformersBackend  # the model itself (SameTokenizer reads it too)

    def __init__(self, backend: TransformersBackend, kv_cache_mb: float, *, count_distinct: bool):
        self._backend = backend  # the name app.promptdpsgd.backend.local_backend unwraps
        self._budget = int(kv_cache_mb * 2**20)
        self._store: KVStore | None = KVStore(self._budget) if self._budget > 0 else None
        self._trie: TokenTrie | None = TokenTrie() if count_distinct else None
        self._stream: Stream | None = None  # one sequence decoded token by token
        self.tokens_sent = 0
        self.tokens_computed = 0
        self.closed = False

    @property
    def store_bytes(self) -> int:
        """Bytes of keys and values held now (0 once closed)."""
        return 0 if self._store is None else self._store.bytes

    def kv_scope(self) -> AbstractContextManager[KVScope]:
        """Already a scope: the same one (its owner closes it)."""
        return nullcontext(self)

    def close(self) -> None:
        """Free the store; later calls take the plain path (nothing is stored again)."""
        if self._store is not None:
            self._store.clear()
        self._store = None
        self._stream = None
        self.closed = True

    def diagnostics(self) -> KVDiagnostics:
        """Token counts of this scope so far (see :class:`KVDiagnostics`: never published)."""
        distinct = None if self._trie is None else self._trie.nodes
        return KVDiagnostics(self.tokens_sent, self.tokens_computed, distinct)

    @torch.inference_mode()
    def last_logits(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        backend = self._backend
        seqs = backend._sequences(prompts)
        before = backend.tokens_computed
        try:
            if self._store is None:
                logits = backend._batched_logits(seqs)
            elif self._streams(seqs):
                logits = self._stream_logits(seqs[0])
            else:
                logits = backend._incremental_logits(seqs, self._store)
        except BaseException:
            if self._store is not None:
                self._store.clear()  # possibly half-written: the retry starts from scratch
            self._stream = None
            raise
        finally:
            self.tokens_computed += backend.tokens_computed - before
        backend.tokens_processed += sum(len(s) for s in seqs)
        self.tokens_sent += sum(len(s) for s in seqs)
        if self._trie is not None:
            for seq in seqs:
                self._trie.add(seq)
        return logits

    def _streams(self, seqs: list[list[int]]) -> bool:
        """Whether one sequence goes on (or starts) the scope's stream: it extends the
        stream, or nothing stored is a prefix of it (a new answer's prompt, which the stream
        takes from the start). Batches, and single prompts that branch off a stored one (a
        job's), take the store."""
        if len(seqs) != 1 or self._store is None:
            return False
        seq = seqs[0]
        if self._stream is not None and self._stream.continues(seq):
            return True
        return self._store.longest(seq)[0] == 0 or not self._backend._fits_window(len(seq))

    def _stream_logits(self, seq: list[int]) -> torch.Tensor:
        backend = self._backend
        if self._stream is None or not self._stream.continues(seq):
            self._stream = Stream(DynamicCache(config=backend.model.config))
        logits = self._stream.extend(backend, seq)
        return logits[None, :]


class Stream:
    """One sequence's live KV cache, extended in place: how an answer is decoded.

    The store's entries are copies cut to each prompt's slots, which the sliding-window layers
    of the packaged Gemma (512 slots) cannot hold past the window: there every answer token
    recomputed the whole prompt (a 1,678-token prompt took 2.3 s a token). The model's own
    cache keeps a sliding layer's last window of slots and a global layer's all, as
    transformers' ``generate`` does, so a token past the window costs one token's pass, and a
    long prompt can be sent in pieces (:func:`app.llm.generation.local_generate` does, so that
    other answers run between them). One row, no padding: the model builds its own masks."""

    def __init__(self, cache: DynamicCache) -> None:
        self.cache = cache
        self.tokens: list[int] = []
        self.logits: torch.Tensor | None = None  # after ``tokens``

    def continues(self, seq: Sequence[int]) -> bool:
        """Whether ``seq`` is the stream's sequence, or it followed by more tokens."""
        n = len(self.tokens)
        return n > 0 and len(seq) >= n and list(seq[:n]) == self.tokens

    def extend(self, backend: TransformersBackend, seq: list[int]) -> torch.Tensor:
        """The last logits after ``seq`` (a row), computing only its tokens past the stream."""
        start = len(self.tokens)
        if start == len(seq) and self.logits is not None:
            return self.logits
        new = torch.tensor([seq[start:]], device=backend.device)
        out = backend.model(
            input_ids=new,
            attention_mask=torch.ones((1, len(seq)), dtype=torch.long, device=backend.device),
            position_ids=torch.arange(start, len(seq), device=backend.device)[None, :],
            use_cache=True,
            logits_to_keep=1,
            **{backend._cache_arg: self.cache},
        )
        backend.tokens_computed += len(seq) - start
        self.tokens = list(seq)
        self.logits = out.logits[0, -1, :].float().cpu()
        return self.logits


class TokenTrie:
    """Counts the distinct prefixes of token sequences (the nodes of their trie)."""

    def __init__(self) -> None:
        self._root: dict[int, dict] = {}
        self.nodes = 0

    def add(self, seq: Sequence[int]) -> None:
        node = self._root
        for token in seq:
            child = node.get(token)
            if child is None:
                child = node[token] = {}
                self.nodes += 1
            node = child


def _shared_length(seqs: list[list[int]]) -> int:
    """Length of the prefix all ``seqs`` share, leaving each at least one token after it."""
    shortest = min(len(s) for s in seqs)
    first, length = seqs[0], 0
    while length < shortest - 1 and all(s[length] == first[length] for s in seqs):
        length += 1
    return length


def _padded_layers(found: list[tuple[int, Layers | None]], span: int) -> Layers:
    """Per layer, the rows' stored (keys, values) left-padded with zeros to ``span`` slots."""
    template = next(layers for _, layers in found if layers is not None)
    padded = []
    for index, (keys, values) in enumerate(template):
        heads, dim = keys.shape[0], keys.shape[-1]
        batch_k = keys.new_zeros((len(found), heads, span, dim))
        batch_v = values.new_zeros((len(found), heads, span, dim))
        for row, (length, layers) in enumerate(found):
            if layers is not None and length:
                batch_k[row, :, span - length :] = layers[index][0]
                batch_v[row, :, span - length :] = layers[index][1]
        padded.append((batch_k, batch_v))
    return padded


class KVStore:
    """Per-prompt KV caches keyed by token ids, least recently used first out, bounded at
    ``budget`` bytes (an entry larger than the budget is not stored: that prompt is simply
    recomputed next time). ``longest`` finds the longest stored prompt that is a proper prefix
    of a prompt."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[tuple[int, ...], Layers] = OrderedDict()
        self._lengths: dict[int, int] = {}  # stored length -> number of entries
        self.bytes = 0

    def clear(self) -> None:
        self._entries.clear()
        self._lengths.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, seq: Sequence[int]) -> tuple[int, Layers | None]:
        """(length, layers) of the longest stored proper prefix of ``seq``; (0, None) if none."""
        key = tuple(seq)
        for length in sorted(self._lengths, reverse=True):
            if length < len(key) and (layers := self._entries.get(key[:length])) is not None:
                self._entries.move_to_end(key[:length])
                return length, layers
        return 0, None

    def put(self, seq: Sequence[int], layers: Layers) -> None:
        """Store ``layers`` for ``seq``, then evict the least recently used past the budget."""
        key = tuple(seq)
        size = _size(layers)
        if key in self._entries or size > self.budget:
            return
        self._entries[key] = layers
        self._lengths[len(key)] = self._lengths.get(len(key), 0) + 1
        self.bytes += size
        while self.bytes > self.budget:
            old, dropped = self._entries.popitem(last=False)
            self.bytes -= _size(dropped)
            self._lengths[len(old)] -= 1
            if not self._lengths[len(old)]:
                del self._lengths[len(old)]


def _size(layers: Layers) -> int:
    """Bytes of one entry's keys and values."""
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
