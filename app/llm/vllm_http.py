"""An :class:`~app.llm.base.LLMBackend` that asks a vLLM server over its OpenAI-compatible API.

Why a server: on a GPU machine vLLM batches thousands of prompts far faster than a local
transformers model, and the synthesis methods only need one number per (prompt, token), so
the whole protocol fits in a few HTTP calls:

* ``POST /tokenize`` and ``POST /detokenize`` (vLLM extensions) turn text into the model's
  token ids and back, so prompts are built from exactly the ids the server will score.
* ``POST /v1/completions`` with ``prompt`` = a list of token-id lists, ``max_tokens=1`` and
  ``temperature=0`` returns, per prompt, the next-token log-probabilities of some tokens in
  ``choices[i].logprobs.top_logprobs[0]``. With ``return_tokens_as_token_ids=true`` its keys
  are ``"token_id:<id>"`` rather than decoded strings, which can collide or fail to encode.

Which tokens come back depends on the server version, hence two modes:

``token_ids``
    vLLM's ``logprob_token_ids`` request field (a list of ids; ``logprobs`` must also be set):
    the answer holds the sampled token plus *every* requested id, so nothing is lost.
    Confirmed in vLLM's ``CompletionRequest`` (``vllm/entrypoints/openai/completion/protocol.py``,
    added by vllm-project/vllm#43463); the engine caps the list at 128 ids
    (``MAX_LOGPROB_TOKEN_IDS`` in ``vllm/sampling_params.py``). The field is one list per
    request, not per prompt, so a batch is sent as the union of its rows' ids (split into
    several requests only when that union exceeds the cap).
``top_logprobs``
    Older servers: ``logprobs=max_logprobs`` returns the natural top tokens; a requested id
    outside them gets probability 0. This is exact only while the requested tokens are among
    the server's ``--max-logprobs`` most likely ones.
``auto``
    Tries ``token_ids`` and switches to ``top_logprobs`` for good the first time the server
    rejects the field (HTTP 400) or silently ignores it (vLLM's request models accept unknown
    fields, so an older server answers with its natural top-k instead of the requested ids).

The server is started by ``scripts/vllm_serve.sh`` (every flag this client relies on). Without
a model name the client asks ``GET /v1/models`` for the one the server serves
(:func:`served_model`), and :meth:`VLLMHttpBackend.check` asks, once, everything a job will
need, so that ``dpsyn worker`` refuses to start on a misconfigured server.

Every failure surfaces as :class:`~app.llm.base.BackendError` naming the server, the endpoint
and the reason; one that may pass (a timeout, a refused or dropped connection, HTTP 429 or
5xx) as its subclass :class:`~app.llm.base.TransientBackendError`. Each request is sent
once: retrying is the caller's, through :mod:`app.llm.retry` (the one retry layer), so a
call is never retried at two levels and a rejected request (HTTP 4xx) never again.

Prompts hold private data and servers quote their input in error messages (whole, cut,
escaped, as token ids), so no message here carries anything the server wrote: an error names
the server, the endpoint, the HTTP status with a fixed description of it and, where the
server's text contains one of a few known vLLM phrases, a fixed hint in our words
(:func:`_hint`). The status also travels as :attr:`BackendError.status`.
"""

from __future__ import annotations

import base64
import copy
import io
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import httpx
import numpy as np

from app.llm.base import BackendError, TransientBackendError
from app.llm.text import is_text_piece
from app.tls import client_context

Mode = Literal["auto", "token_ids", "top_logprobs"]

#: vLLM's per-request limit on ``logprob_token_ids`` (``MAX_LOGPROB_TOKEN_IDS``).
MAX_LOGPROB_TOKEN_IDS = 128

COMPLETIONS = "/v1/completions"
TOKENIZE = "/tokenize"
DETOKENIZE = "/detokenize"
TOKENIZER_INFO = "/tokenizer_info"
#: Candidates asked beyond K, so that the non-text ones can be left out (``top_k``).
TEXT_MARGIN = 32
#: The ``--max-logprobs`` that scripts/vllm_serve.sh starts a server with (K = 100 and the
#: margin fit); the service's backend assumes it, and its start-up check names the flag
#: when a server allows fewer.
SERVED_MAX_LOGPROBS = 200
MODELS = "/v1/models"

_TOKEN_ID_PREFIX = "token_id:"
#: A prompt's embeddings from its token ids (BOS first): n x hidden, float32.
PromptEmbedder = Callable[[Sequence[int]], np.ndarray]
# What an HTTP status means, in our words: the only description of a refused request.
_STATUS_WORDS = {
    400: "the server refused the request as invalid",
    401: "the server asks for credentials",
    403: "the server refused access",
    404: "the server has no such endpoint or model",
    408: "the server timed out reading the request",
    413: "the request is too large for the server",
    422: "the server could not process the request",
    429: "the server is limiting the rate of requests",
}
# Known vLLM error phrases (lower case, all must occur) and the fixed hint each gives. The
# server's text is only searched for them, never quoted.
_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("logprobs", "max allowed"), "more log-probabilities asked than the server's --max-logprobs"),
    (("context length",), "a prompt is longer than the model's context (--max-model-len)"),
    (("model", "does not exist"), "the server does not serve this model name"),
    (
        ("enable-prompt-embeds",),
        "the server takes no prompt embeddings: start it with "
        "--enable-prompt-embeds (scripts/vllm_serve.sh does)",
    ),
)


class _ServerRejectedError(BackendError):
    """A final HTTP error status (4xx but 429); ``status`` lets ``auto`` mode react to 400."""

    status: int

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message, status=status)


class VLLMHttpBackend:
    """Batched next-token distributions from a vLLM OpenAI-compatible server.

    Args:
        url: Base URL of the server, e.g. ``http://127.0.0.1:8000`` (no ``/v1``).
        model: Served model name (vLLM's ``--served-model-name``, by default ``--model``).
        timeout: Seconds allowed per HTTP request (connect, read, write each).
        mode: ``"auto"``, ``"token_ids"`` or ``"top_logprobs"`` (see the module docstring).
        max_logprobs: The server's ``--max-logprobs``; the most top tokens one request may ask.
        eos_id: End-of-sequence id. When omitted it is read once from ``GET /tokenizer_info``
            (start vLLM with ``--enable-tokenizer-info-endpoint``): the tokenizer's
            ``eos_token`` string, tokenized by the server.
        client: An ``httpx.Client`` to use instead of creating one (tests; custom transport).
            The backend does not close an injected client.
    """

    def __init__(
        self,
        *,
        url: str,
        model: str,
        timeout: float = 60.0,
        mode: Mode = "auto",
        max_logprobs: int = 100,
        eos_id: int | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        if mode not in ("auto", "token_ids", "top_logprobs"):
            raise ValueError(f"mode must be auto, token_ids or top_logprobs, not {mode!r}")
        if max_logprobs < 1:
            raise ValueError("max_logprobs must be at least 1")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._url = url.rstrip("/")
        self._model = model
        self._mode: Mode = mode
        self._max_logprobs = max_logprobs
        self._eos_id = eos_id
        self._owns_client = client is None
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(timeout), verify=client_context()
        )
        self._bos_prefix: tuple[int, ...] | None = None
        self._newline_ids: frozenset[int] | None = None
        self._text: dict[int, bool] = {}  # is_text of each candidate id met, decoded once
        self._embed: PromptEmbedder | None = None  # with_prompt_embeds

    def with_prompt_embeds(self, embed: PromptEmbedder) -> VLLMHttpBackend:
        """This backend with every prompt sent as ``embed(ids)``'s embeddings (vLLM's
        ``prompt_embeds``; the server needs ``--enable-prompt-embeds``) rather than as token
        ids: how a soft prompt is put in front of a prompt (``app.promptdpsgd.vllm``). The
        copy shares this one's HTTP client, tokenizer answers and settings."""
        twin = copy.copy(self)
        twin._owns_client, twin._embed = False, embed
        return twin

    @property
    def bos_ids(self) -> tuple[int, ...]:
        """The ids the tokenizer puts before any text (what every prompt starts with)."""
        return self._bos()

    def text_prompt(self, text: str) -> dict[str, Any]:
        """The request field that sends ``text`` as this backend sends prompts: the text
        itself, or (:meth:`with_prompt_embeds`) its embeddings, BOS first."""
        if self._embed is None:
            return {"prompt": text}
        return self._prompt_field([self._with_bos(self.tokenize(text))])

    def _prompt_field(self, prompts: list[list[int]]) -> dict[str, Any]:
        if self._embed is None:
            return {"prompt": prompts}
        return {"prompt_embeds": [encode_embeddings(self._embed(p)) for p in prompts]}

    # -- protocol properties -------------------------------------------------------------

    @property
    def name(self) -> str:
        """The served model name, as recorded with results."""
        return self._model

    @property
    def mode(self) -> Mode:
        """The current way of asking for probabilities; ``auto`` settles on first use."""
        return self._mode

    @property
    def eos_id(self) -> int:
        """End-of-sequence id: the constructor's, else the server tokenizer's ``eos_token``."""
        if self._eos_id is None:
            self._eos_id = self._discover_eos_id()
        return self._eos_id

    @property
    def newline_ids(self) -> frozenset[int]:
        """Ids whose text contains a newline, among the tokenizations of 1 to 3 newlines.

        Tokenizers often have separate tokens for one and for several line breaks, and a
        demonstration must stop at any of them.
        """
        if self._newline_ids is None:
            candidates = {i for text in ("\n", "\n\n", "\n\n\n") for i in self.tokenize(text)}
            found = frozenset(i for i in candidates if "\n" in self._decode([i]))
            if not found:
                raise BackendError(f"{self._where(TOKENIZE)}: no token of '\\n' decodes to one")
            self._newline_ids = found
        return self._newline_ids

    # -- tokenizer -----------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """The server tokenizer's ids for ``text``, without special tokens."""
        return self._tokenize(text, add_special_tokens=False)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; the BOS prefix and EOS ids are dropped before decoding."""
        special = set(self._bos()) | {self.eos_id}
        return self._decode([int(i) for i in ids if int(i) not in special])

    # -- probabilities -------------------------------------------------------------------

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        """Next-token probabilities of ``token_sets[b]`` after ``prompts[b]``, renormalised.

        Renormalisation is done in log space (subtracting the row maximum), so a row whose
        tokens are all very unlikely (vLLM clamps log-probabilities at -9999) still sums to 1.
        """
        sets = np.asarray(token_sets)
        if sets.ndim != 2 or sets.shape[0] != len(prompts) or sets.shape[1] == 0:
            raise ValueError(
                f"token_sets must be {len(prompts)} x K with K >= 1, got shape {sets.shape}"
            )
        if len(prompts) == 0:
            return np.zeros((0, sets.shape[1]))
        full = [self._with_bos(p) for p in prompts]
        rows = [[int(t) for t in row] for row in sets]
        if self._mode == "top_logprobs":
            logprobs = self._probs_top_logprobs(full, rows)
        else:
            logprobs = self._probs_token_ids_or_fallback(full, rows)
        return _renormalise(logprobs)

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        """The ``k`` most probable next-token ids per prompt that are text, most probable
        first (end-of-sequence and newlines count as text: they end a demonstration).

        The server is asked for up to :data:`TEXT_MARGIN` more than ``k`` (within its
        ``--max-logprobs``) and the candidates that are not text (control and template
        tokens, private-use characters: :meth:`is_text`) are left out, as the local backend
        leaves them out of its vocabulary; where the margin holds too few, the best of those
        fill the row's end. Ties are broken by the smaller id so the answer is reproducible.
        """
        if k < 1:
            raise ValueError("k must be at least 1")
        if k > self._max_logprobs:
            raise BackendError(
                f"{self._where(COMPLETIONS)}: top_k asks for {k} tokens but the server allows "
                f"{self._max_logprobs} (--max-logprobs); restart vLLM with a larger value"
            )
        if len(prompts) == 0:
            return np.zeros((0, k), dtype=np.int64)
        asked = min(k + TEXT_MARGIN, self._max_logprobs)
        tops = self._complete([self._with_bos(p) for p in prompts], logprobs=asked)
        out = np.empty((len(prompts), k), dtype=np.int64)
        for b, top in enumerate(tops):
            ranked = [t for t, _ in sorted(top.items(), key=lambda item: (-item[1], item[0]))]
            if len(ranked) < k:
                raise BackendError(
                    f"{self._where(COMPLETIONS)}: row {b} returned {len(ranked)} of the "
                    f"{k} requested top tokens"
                )
            text: list[int] = []
            other: list[int] = []
            for token in ranked:
                (text if self.is_text(token) else other).append(token)
            out[b] = (text + other)[:k]
        return out

    def is_text(self, token: int) -> bool:
        """Whether ``token`` may be written in a demonstration: end-of-sequence and newlines,
        or a token whose text (decoded by the server, once per id) is text
        (:func:`app.llm.text.is_text_piece`)."""
        if token not in self._text:
            kept = token == self.eos_id or token in self.newline_ids
            self._text[token] = kept or is_text_piece(self._decode([token]))
        return self._text[token]

    # -- start-up check ------------------------------------------------------------------

    def check(self, k: int = 100) -> None:
        """Ask the server everything a job will need once, so a misconfigured server is
        found when a worker starts rather than as a failed (and possibly charged) job.

        Checks that the server serves this model, that the EOS token can be read
        (``--enable-tokenizer-info-endpoint``), that newlines tokenize, and that one
        ``top_k`` of ``k`` tokens fits the server's ``--max-logprobs``. Raises
        :class:`BackendError` naming the flag to fix, or :class:`TransientBackendError`
        while the server is not reachable yet.
        """
        served = _served_names(self._client, self._url)
        if self._model not in served:
            raise BackendError(
                f"{self._where(MODELS)}: the server serves {', '.join(served) or 'no model'}, "
                f"not {self._model!r}; set DPSYN_MODEL to the served name (or leave it unset)"
            )
        _ = self.eos_id
        _ = self.newline_ids
        probe = self.tokenize("1")
        try:
            self.top_k([probe], min(k, self._max_logprobs))
        except _ServerRejectedError as err:
            raise BackendError(
                f"{err}; start vLLM with --max-logprobs {k} or more (scripts/vllm_serve.sh)"
            ) from None

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP client if this backend created it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> VLLMHttpBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the two probability modes -------------------------------------------------------

    def _probs_token_ids_or_fallback(
        self, prompts: list[list[int]], rows: list[list[int]]
    ) -> np.ndarray:
        """Mode ``token_ids``; in ``auto`` mode, switch to ``top_logprobs`` when unsupported."""
        try:
            logprobs = self._probs_token_ids(prompts, rows)
        except _ServerRejectedError as err:
            if self._mode != "auto" or err.status != 400:
                raise
            logprobs = None
        except _FieldIgnoredError:
            if self._mode != "auto":
                raise BackendError(
                    f"{self._where(COMPLETIONS)}: the server ignored logprob_token_ids (a vLLM "
                    "without it); use mode='top_logprobs' or upgrade vLLM"
                ) from None
            logprobs = None
        if logprobs is not None:
            if self._mode == "auto":
                self._mode = "token_ids"
            return logprobs
        logprobs = self._probs_top_logprobs(prompts, rows)
        self._mode = "top_logprobs"  # remembered only once the fallback has worked
        return logprobs

    def _probs_token_ids(self, prompts: list[list[int]], rows: list[list[int]]) -> np.ndarray:
        """Exact log-probabilities of each row's ids via ``logprob_token_ids``."""
        cap = min(MAX_LOGPROB_TOKEN_IDS, self._max_logprobs)
        out = np.empty((len(rows), len(rows[0])))
        for members, ids in _group_rows(rows, cap, self._where(COMPLETIONS)):
            tops = self._complete(
                [prompts[b] for b in members],
                logprobs=len(ids),  # equal to the list length: accepted by every version
                logprob_token_ids=ids,
            )
            for b, top in zip(members, tops, strict=True):
                if any(t not in top for t in ids):
                    raise _FieldIgnoredError
                out[b] = [top[t] for t in rows[b]]
        return out

    def _probs_top_logprobs(self, prompts: list[list[int]], rows: list[list[int]]) -> np.ndarray:
        """Log-probabilities of each row's ids among the top ``max_logprobs`` tokens.

        An id outside the returned top list gets -inf (probability 0 after renormalising).
        A row with none of its ids returned cannot be renormalised: it comes back as NaN, not
        as an error, because whether it happens depends on the prompt (private records, in a
        synthesis step), and a call that fails for one row fails the whole job without noise.
        The caller decides: the token loop puts the uniform distribution in its place
        (``app.privacy.geometry.as_distributions``), scoring treats it as uniform too.
        """
        tops = self._complete(prompts, logprobs=self._max_logprobs)
        out = np.full((len(rows), len(rows[0])), -math.inf)
        for b, (row, top) in enumerate(zip(rows, tops, strict=True)):
            out[b] = [top.get(t, -math.inf) for t in row]
        return out

    def _complete(
        self,
        prompts: list[list[int]],
        *,
        logprobs: int,
        logprob_token_ids: list[int] | None = None,
    ) -> list[dict[int, float]]:
        """One ``/v1/completions`` call; per prompt, in prompt order, ``{id: logprob}``."""
        body: dict[str, Any] = {
            "model": self._model,
            **self._prompt_field(prompts),
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": logprobs,
            "return_tokens_as_token_ids": True,
        }
        if logprob_token_ids is not None:
            body["logprob_token_ids"] = logprob_token_ids
        return self._parse_completions(self._post(COMPLETIONS, body), len(prompts))

    def _parse_completions(self, payload: Any, n_prompts: int) -> list[dict[int, float]]:
        """Top log-probabilities per prompt, ordered by each choice's ``index``."""
        where = self._where(COMPLETIONS)
        try:
            choices = payload["choices"]
            by_index = {int(c["index"]): c["logprobs"]["top_logprobs"][0] for c in choices}
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise BackendError(
                f"{where}: unexpected response shape ({type(err).__name__})"
            ) from None
        if sorted(by_index) != list(range(n_prompts)):
            raise BackendError(
                f"{where}: expected choices 0..{n_prompts - 1}, got {len(by_index)} distinct"
            )
        return [_parse_top(by_index[i], where) for i in range(n_prompts)]

    # -- tokenizer helpers ---------------------------------------------------------------

    def _tokenize(self, text: str, *, add_special_tokens: bool) -> list[int]:
        body = {"model": self._model, "prompt": text, "add_special_tokens": add_special_tokens}
        payload = self._post(TOKENIZE, body)
        try:
            return [int(t) for t in payload["tokens"]]
        except (KeyError, TypeError, ValueError):
            raise BackendError(f"{self._where(TOKENIZE)}: response has no 'tokens' list") from None

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        payload = self._post(DETOKENIZE, {"model": self._model, "tokens": ids})
        text = payload.get("prompt") if isinstance(payload, dict) else None
        if not isinstance(text, str):
            raise BackendError(f"{self._where(DETOKENIZE)}: response has no 'prompt' string")
        return text

    def _bos(self) -> tuple[int, ...]:
        """The ids the tokenizer puts before any text (BOS for Gemma/Llama, none for Qwen).

        vLLM adds no special tokens to a token-id prompt, so the backend prepends these itself;
        they are what ``/tokenize`` returns for the empty string with special tokens on.
        """
        if self._bos_prefix is None:
            self._bos_prefix = tuple(self._tokenize("", add_special_tokens=True))
        return self._bos_prefix

    def _with_bos(self, prompt: Sequence[int]) -> list[int]:
        ids = [int(t) for t in prompt]
        bos = list(self._bos())
        return ids if ids[: len(bos)] == bos else bos + ids

    def _discover_eos_id(self) -> int:
        """EOS id from ``/tokenizer_info`` (the tokenizer config's ``eos_token``)."""
        where = self._where(TOKENIZER_INFO)
        try:
            info = self._request("GET", TOKENIZER_INFO, None)
        except _ServerRejectedError as err:
            raise BackendError(
                f"{err}; pass eos_id= or start vLLM with --enable-tokenizer-info-endpoint"
            ) from None
        token = info.get("eos_token") if isinstance(info, dict) else None
        if isinstance(token, dict):  # an AddedToken serialised as a mapping
            token = token.get("content")
        if not isinstance(token, str) or not token:
            raise BackendError(f"{where}: no eos_token in the tokenizer config; pass eos_id=")
        ids = self.tokenize(token)
        if len(ids) != 1:
            raise BackendError(f"{where}: eos_token is not a single token; pass eos_id=")
        return ids[0]

    # -- HTTP ----------------------------------------------------------------------------

    def _where(self, endpoint: str) -> str:
        return f"vLLM server {self._url} {endpoint}"

    def _post(self, endpoint: str, body: dict[str, Any]) -> Any:
        return self._request("POST", endpoint, body)

    def _request(self, method: str, endpoint: str, body: dict[str, Any] | None) -> Any:
        """Send once; return the decoded JSON body.

        Connection errors, timeouts, 429 and 5xx raise :class:`TransientBackendError` (a
        restarting or overloaded server recovers: the caller's retry layer may ask again);
        other statuses are the caller's mistake and raise a final :class:`BackendError`.
        """
        where = self._where(endpoint)
        response = _send(self._client, method, self._url + endpoint, where, body)
        return self._decode_response(response, where)

    @staticmethod
    def _decode_response(response: httpx.Response, where: str) -> Any:
        status = response.status_code
        if status != 200:
            message = f"{where}: HTTP {status}: {_status_words(status)}"
            if hint := _hint(response):
                message = f"{message} ({hint})"
            if status == 429 or status >= 500:
                raise TransientBackendError(message, status=status)
            raise _ServerRejectedError(message, status)
        try:
            return response.json()
        except ValueError:
            raise BackendError(f"{where}: HTTP 200 but the body is not JSON") from None


def _send(
    client: httpx.Client, method: str, url: str, where: str, body: Any = None
) -> httpx.Response:
    """One request; a timeout or a connection failure is transient (the server may be
    restarting), named by ``where`` and the error's type, never by its message (which may
    quote what was sent or received)."""
    try:
        return client.request(method, url, json=body)
    except httpx.TimeoutException as err:
        raise TransientBackendError(f"{where}: timed out ({type(err).__name__})") from None
    except httpx.TransportError as err:
        raise TransientBackendError(f"{where}: connection failed ({type(err).__name__})") from None


def served_model(url: str, *, timeout: float = 10.0) -> str:
    """The one model a vLLM server serves, from ``GET /v1/models``.

    Lets ``--backend vllm --url URL`` work without repeating the served name: a server started
    by ``scripts/vllm_serve.sh`` serves exactly one. A server with several (or none) is an
    error naming them, since guessing could score prompts with the wrong model.
    """
    base = url.rstrip("/")
    with httpx.Client(timeout=httpx.Timeout(timeout), verify=client_context()) as client:
        names = _served_names(client, base)
    if len(names) != 1:
        raise BackendError(
            f"vLLM server {base} {MODELS}: it serves {len(names)} models "
            f"({', '.join(names) or 'none'}); name one with --model (DPSYN_MODEL)"
        )
    return names[0]


def _served_names(client: httpx.Client, base: str) -> list[str]:
    """The model names of ``GET /v1/models`` (transport errors are transient)."""
    where = f"vLLM server {base} {MODELS}"
    response = _send(client, "GET", base + MODELS, where)
    payload = VLLMHttpBackend._decode_response(response, where)
    try:
        return [str(entry["id"]) for entry in payload["data"]]
    except (KeyError, TypeError):
        raise BackendError(f"{where}: response has no 'data' list of models") from None


class _FieldIgnoredError(Exception):
    """The server answered a ``logprob_token_ids`` request without the requested ids."""


def _group_rows(rows: list[list[int]], cap: int, where: str) -> list[tuple[list[int], list[int]]]:
    """Split rows into consecutive groups whose union of ids fits one request's ``cap``.

    Returns ``(row indices, sorted union of their ids)`` per group; usually a single group,
    since the methods score many prompts against the same candidate tokens.
    """
    groups: list[tuple[list[int], set[int]]] = []
    for b, row in enumerate(rows):
        ids = set(row)
        if len(ids) > cap:
            raise BackendError(
                f"{where}: row {b} asks for {len(ids)} distinct tokens; one request allows {cap}"
            )
        if groups and len(groups[-1][1] | ids) <= cap:
            groups[-1][0].append(b)
            groups[-1][1].update(ids)
        else:
            groups.append(([b], ids))
    return [(members, sorted(ids)) for members, ids in groups]


def _parse_top(top: Any, where: str) -> dict[int, float]:
    """``{"token_id:42": -1.5, ...}`` to ``{42: -1.5, ...}``."""
    if not isinstance(top, dict):
        raise BackendError(f"{where}: top_logprobs[0] is not an object")
    out: dict[int, float] = {}
    for key, value in top.items():
        if not (isinstance(key, str) and key.startswith(_TOKEN_ID_PREFIX)):
            raise BackendError(
                f"{where}: top_logprobs keys are not 'token_id:<id>'; this vLLM ignores "
                "return_tokens_as_token_ids, start it with --return-tokens-as-token-ids"
            )
        try:
            out[int(key[len(_TOKEN_ID_PREFIX) :])] = float(value)
        except (TypeError, ValueError):
            raise BackendError(f"{where}: malformed top_logprobs entry") from None
    return out


def _renormalise(logprobs: np.ndarray) -> np.ndarray:
    """Row-wise softmax of log-probabilities; -inf entries become exactly 0, and a row of
    -inf only (none of its tokens returned) becomes NaN."""
    top = logprobs.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        weights = np.exp(logprobs - np.where(np.isfinite(top), top, 0.0))
        return weights / weights.sum(axis=1, keepdims=True)


def _status_words(status: int) -> str:
    """A fixed description of an HTTP error status."""
    if status in _STATUS_WORDS:
        return _STATUS_WORDS[status]
    if status >= 500:
        return "the server failed or is unavailable"
    return "the server refused the request"


def _hint(response: httpx.Response) -> str | None:
    """A fixed hint when the server's error text holds a known vLLM phrase, else None.

    Why search rather than quote: the text may quote the prompt in any form (whole, cut,
    ``repr``- or JSON-escaped, as token ids), so no part of it can be shown safely; but a few
    failures are a server setting the operator can fix, and their phrases name it.
    """
    try:
        text = response.text.casefold()
    except (UnicodeDecodeError, LookupError):
        return None
    for phrases, hint in _HINTS:
        if all(phrase in text for phrase in phrases):
            return hint
    return None


def encode_embeddings(rows: np.ndarray) -> str:
    """Embeddings as vLLM's ``prompt_embeds`` takes them: a tensor file (``torch.save``),
    base64. torch is imported here only: a server without soft prompts never needs it."""
    import torch

    buffer = io.BytesIO()
    torch.save(torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)), buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
