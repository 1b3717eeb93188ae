"""VLLMHttpBackend against a fake vLLM server that speaks vLLM's documented JSON schemas.

The fake is a real HTTP server (stdlib, 127.0.0.1, ephemeral port) in a thread. Its "model"
is a fixed logit table indexed by the last prompt token, so every test computes the expected
probabilities from that table on its own and compares them with what came over the wire.
Response shapes follow vLLM's ``CompletionResponse`` / ``CompletionLogProbs``
(``vllm/entrypoints/openai/completion/protocol.py``), ``TokenizeResponse`` /
``DetokenizeResponse`` (``vllm/entrypoints/serve/tokenize/protocol.py``) and its
``{"error": {"message", "type", "param", "code"}}`` error body.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import numpy as np
import pytest

from app.llm.base import BackendError, LLMBackend, TransientBackendError
from app.llm.factory import BackendKind, make_backend
from app.llm.provider import BackendProvider
from app.llm.retry import RetryingBackend, RetryPolicy
from app.llm.vllm_http import TEXT_MARGIN, VLLMHttpBackend, served_model

MODEL = "toy-model"
VOCAB = 1000
EOS, BOS = 1, 2
# Multi-character tokens; every other token is one character with id = ord(char).
MULTI = {1: "<eos>", 2: "<bos>", 900: "\n\n", 901: " the"}
LOGPROB_FLOOR = -9999.0  # vLLM clamps -inf to this before JSON encoding


# -- the toy model ---------------------------------------------------------------------------


def toy_logprobs(prev: int) -> np.ndarray:
    """Next-token log-probabilities after token ``prev``: a fixed, tie-free table."""
    v = np.arange(VOCAB)
    logits = 6.0 * np.sin(0.37 * v + 1.7 * (prev % VOCAB)) + 0.001 * v
    logits[BOS] = -80.0  # some tokens are extremely unlikely, as in a real model
    return logits - np.logaddexp.reduce(logits)


def expected_probs(prompt: list[int], ids: list[int], top_m: int | None = None) -> np.ndarray:
    """P(ids | prompt) renormalised over ids; with ``top_m``, ids outside the top m count 0."""
    lp = toy_logprobs(prompt[-1])
    p = np.exp(lp[ids])
    if top_m is not None:
        top = set(np.argsort(-lp)[:top_m].tolist())
        p = p * np.array([i in top for i in ids])
    return p / p.sum()


def ranked(prompt: list[int]) -> np.ndarray:
    return np.argsort(-toy_logprobs(prompt[-1]))


def toy_tokenize(text: str) -> list[int]:
    ids, pos = [], 0
    longest_first = sorted(MULTI.items(), key=lambda kv: -len(kv[1]))
    while pos < len(text):
        for tid, piece in longest_first:
            if text.startswith(piece, pos):
                ids.append(tid)
                pos += len(piece)
                break
        else:
            code = ord(text[pos])
            if not 3 <= code < 900:
                raise ValueError(f"cannot tokenize {text!r}")
            ids.append(code)
            pos += 1
    return ids


def toy_text(tid: int) -> str:
    return MULTI.get(tid, chr(tid))


# -- the fake server -------------------------------------------------------------------------


@dataclass
class FakeState:
    """What the fake server does, and what it was asked."""

    token_ids_support: str = "honoured"  # "honoured", "rejected" (HTTP 400) or "ignored"
    max_logprobs: int = 100
    fail_statuses: list[int] = field(default_factory=list)  # for the next completion calls
    completion_sleep_s: float = 0.0
    reverse_choices: bool = True  # choices arrive out of order; the index says which is which
    echo_inputs_in_errors: bool = False
    tokenizer_info_enabled: bool = True
    served: list[str] = field(default_factory=lambda: [MODEL])  # GET /v1/models
    requests: list[tuple[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def calls(self, path: str) -> list[Any]:
        with self.lock:
            return [body for p, body in self.requests if p == path]


class FakeVLLMHandler(BaseHTTPRequestHandler):
    server: _FakeHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def state(self) -> FakeState:
        return self.server.state

    def do_GET(self) -> None:
        self.state.requests.append((self.path, None))
        if self.path == "/tokenizer_info" and self.state.tokenizer_info_enabled:
            self._json(200, {"tokenizer_class": "ToyTokenizer", "eos_token": "<eos>"})
        elif self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            models = [{"id": name, "object": "model"} for name in self.state.served]
            self._json(200, {"object": "list", "data": models})
        else:
            self._error(404, "Not Found")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.state.lock:
            self.state.requests.append((self.path, body))
        routes = {
            "/v1/completions": self._completions,
            "/tokenize": self._tokenize,
            "/detokenize": self._detokenize,
        }
        if self.path not in routes:
            self._error(404, "Not Found")
        elif body.get("model") != MODEL:
            self._error(404, f"The model `{body.get('model')}` does not exist.")
        else:
            routes[self.path](body)

    def _tokenize(self, body: dict[str, Any]) -> None:
        try:
            ids = toy_tokenize(body["prompt"])
        except ValueError:
            self._error(400, f"Cannot tokenize input_value={body['prompt']!r}")
            return
        if body.get("add_special_tokens", True):
            ids = [BOS, *ids]
        self._json(200, {"count": len(ids), "max_model_len": 4096, "tokens": ids})

    def _detokenize(self, body: dict[str, Any]) -> None:
        self._json(200, {"prompt": "".join(toy_text(t) for t in body["tokens"])})

    def _completions(self, body: dict[str, Any]) -> None:
        state = self.state
        with state.lock:
            status = state.fail_statuses.pop(0) if state.fail_statuses else None
        if status is not None:
            self._error(status, "Service Unavailable" if status >= 500 else "try again")
            return
        time.sleep(state.completion_sleep_s)
        problem = self._completion_problem(body)
        if problem:
            self._error(400, problem)
            return
        choices = [self._choice(i, prompt, body) for i, prompt in enumerate(body["prompt"])]
        if state.reverse_choices:
            choices.reverse()
        n_prompt = sum(len(p) for p in body["prompt"])
        usage = {"prompt_tokens": n_prompt, "completion_tokens": len(choices)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        self._json(
            200,
            {
                "id": "cmpl-fake",
                "object": "text_completion",
                "created": 0,
                "model": MODEL,
                "choices": choices,
                "usage": usage,
            },
        )

    def _completion_problem(self, body: dict[str, Any]) -> str | None:
        """The 400 message vLLM would give, or None."""
        state = self.state
        if state.echo_inputs_in_errors:
            prompt = body["prompt"]
            flat = " ".join(str(t) for row in prompt for t in row)
            return f"Input too long [type=too_long, input_value={prompt}]; tokens: {flat}"
        ids = body.get("logprob_token_ids")
        if ids is not None and state.token_ids_support == "rejected":
            return (
                "1 validation error: logprob_token_ids Extra inputs are not permitted "
                f"[type=extra_forbidden, input_value={ids}, input_type=list]"
            )
        honoured = ids is not None and state.token_ids_support == "honoured"
        if honoured and len(ids) > 128:
            return "logprob_token_ids may list at most 128 tokens"
        logprobs = body.get("logprobs")
        if logprobs is None:
            return "when using `logprob_token_ids`, `logprobs` must be set." if honoured else None
        if not honoured and logprobs > state.max_logprobs:
            return (
                f"Requested sample logprobs of {logprobs}, which is greater than max "
                f"allowed: {state.max_logprobs}"
            )
        return None

    def _choice(self, index: int, prompt: list[int], body: dict[str, Any]) -> dict[str, Any]:
        lp = toy_logprobs(prompt[-1])
        sampled = int(np.argmax(lp))  # temperature 0
        ids = body.get("logprob_token_ids")
        if ids is not None and self.state.token_ids_support == "honoured":
            listed = [sampled, *ids]
        else:
            listed = [sampled, *np.argsort(-lp)[: body["logprobs"]].tolist()]
        as_ids = body.get("return_tokens_as_token_ids")

        def key(t: int) -> str:
            return f"token_id:{t}" if as_ids else toy_text(t)

        top = {key(int(t)): max(float(lp[t]), LOGPROB_FLOOR) for t in listed}
        return {
            "index": index,
            "text": toy_text(sampled),
            "logprobs": {
                "text_offset": [0],
                "token_logprobs": [float(lp[sampled])],
                "tokens": [key(sampled)],
                "top_logprobs": [top],
            },
            "finish_reason": "length",
            "stop_reason": None,
            "prompt_logprobs": None,
        }

    def _error(self, status: int, message: str) -> None:
        error = {"message": message, "type": "BadRequestError", "param": None, "code": status}
        self._json(status, {"error": error})

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout tests)
            pass


class _FakeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    state: FakeState

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@dataclass
class FakeServer:
    url: str
    state: FakeState

    def backend(self, **kwargs: Any) -> VLLMHttpBackend:
        options: dict[str, Any] = {"timeout": 5.0, "max_logprobs": 100}
        options.update(kwargs)
        return VLLMHttpBackend(url=self.url, model=MODEL, **options)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    httpd = _FakeHTTPServer(("127.0.0.1", 0), FakeVLLMHandler)
    httpd.state = FakeState()
    # A short poll interval: shutdown() waits up to one interval, for every test.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield FakeServer(url=f"http://127.0.0.1:{httpd.server_address[1]}", state=httpd.state)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


PROMPTS = [[104, 105, 32], [116, 901], [65]]


def candidate_sets(top_m: int = 100) -> np.ndarray:
    """Per prompt: its two likeliest tokens, one just inside and one far outside the top m."""
    rows = []
    for prompt in PROMPTS:
        order = ranked(prompt)
        rows.append([order[0], order[1], order[top_m - 1], order[top_m + 200]])
    return np.array(rows)


# -- tokenizer -------------------------------------------------------------------------------


def test_is_an_llm_backend(server: FakeServer) -> None:
    assert isinstance(server.backend(), LLMBackend)
    assert server.backend().name == MODEL


def test_tokenize_and_detokenize_round_trip(server: FakeServer) -> None:
    backend = server.backend()
    ids = backend.tokenize("hi the\n\nx")
    assert ids == [104, 105, 901, 900, 120]  # no BOS: tokenize() adds no special tokens
    assert backend.detokenize([BOS, *ids, EOS]) == "hi the\n\nx"  # specials dropped
    sent = server.state.calls("/tokenize")[0]
    assert sent["add_special_tokens"] is False


def test_eos_from_tokenizer_info_and_newline_ids(server: FakeServer) -> None:
    backend = server.backend()
    assert backend.eos_id == EOS
    assert backend.newline_ids == frozenset({10, 900})


def test_eos_from_constructor_skips_the_server(server: FakeServer) -> None:
    backend = server.backend(eos_id=7)
    assert backend.eos_id == 7
    assert server.state.calls("/tokenizer_info") == []


def test_eos_without_tokenizer_info_endpoint_says_what_to_do(server: FakeServer) -> None:
    server.state.tokenizer_info_enabled = False
    with pytest.raises(BackendError, match="--enable-tokenizer-info-endpoint") as err:
        _ = server.backend().eos_id
    assert "/tokenizer_info" in str(err.value) and server.url in str(err.value)


# -- next_token_probs ------------------------------------------------------------------------


def test_token_ids_mode_gives_exact_renormalised_probs_in_prompt_order(
    server: FakeServer,
) -> None:
    sets = candidate_sets()
    probs = server.backend(mode="token_ids").next_token_probs(PROMPTS, sets)

    want = np.array([expected_probs(p, list(s)) for p, s in zip(PROMPTS, sets, strict=True)])
    assert probs.shape == (3, 4)
    assert np.allclose(probs, want, rtol=1e-9, atol=1e-12)
    assert np.allclose(probs.sum(axis=1), 1.0)
    assert (probs[:, 3] > 0).all()  # far outside the top 100, still scored exactly
    (request,) = server.state.calls("/v1/completions")  # one request for the whole batch
    assert request["logprob_token_ids"] == sorted({int(t) for t in sets.ravel()})
    assert request["logprobs"] == len(request["logprob_token_ids"])
    assert request["prompt"] == [[BOS, *p] for p in PROMPTS]  # BOS added by the backend
    assert request["max_tokens"] == 1 and request["temperature"] == 0


def test_top_logprobs_mode_renormalises_and_zeroes_missing_ids(server: FakeServer) -> None:
    sets = candidate_sets(top_m=100)
    probs = server.backend(mode="top_logprobs").next_token_probs(PROMPTS, sets)

    want = np.array(
        [expected_probs(p, list(s), top_m=100) for p, s in zip(PROMPTS, sets, strict=True)]
    )
    assert np.allclose(probs, want, rtol=1e-9, atol=1e-12)
    assert (probs[:, 3] == 0).all() and (probs[:, 2] > 0).all()
    (request,) = server.state.calls("/v1/completions")
    assert "logprob_token_ids" not in request
    assert request["logprobs"] == 100 and request["return_tokens_as_token_ids"] is True


def test_top_logprobs_mode_row_with_no_returned_id_is_nan_not_an_error(
    server: FakeServer,
) -> None:
    """Whether a row's tokens are among the top ones depends on the prompt (private records in
    a synthesis step): that row alone comes back as NaN, for the caller to replace, instead of
    failing the call (issue 31); the other rows are answered as usual."""
    sets = candidate_sets()
    sets[1] = ranked(PROMPTS[1])[500:504]  # none of row 1's tokens is in the top 100
    probs = server.backend(mode="top_logprobs").next_token_probs(PROMPTS, sets)
    assert np.isnan(probs[1]).all()
    assert np.allclose(probs[[0, 2]].sum(axis=1), 1.0) and np.isfinite(probs[[0, 2]]).all()


def test_tiny_probabilities_still_renormalise(server: FakeServer) -> None:
    """Tokens whose probability underflows float64 are compared in log space."""
    prompt = [[104]]
    lp = toy_logprobs(104)
    worst = np.argsort(lp)[:3]
    probs = server.backend(mode="token_ids").next_token_probs(prompt, np.array([worst]))
    want = np.exp(lp[worst] - lp[worst].max())
    assert np.allclose(probs[0], want / want.sum())


def test_auto_falls_back_on_http_400_and_remembers(server: FakeServer) -> None:
    server.state.token_ids_support = "rejected"
    backend = server.backend()
    sets = candidate_sets()
    want = np.array(
        [expected_probs(p, list(s), top_m=100) for p, s in zip(PROMPTS, sets, strict=True)]
    )

    assert np.allclose(backend.next_token_probs(PROMPTS, sets), want)
    assert np.allclose(backend.next_token_probs(PROMPTS, sets), want)
    asked = ["logprob_token_ids" in r for r in server.state.calls("/v1/completions")]
    assert asked == [True, False, False]  # tried once, then remembered
    assert backend.mode == "top_logprobs"


def test_auto_falls_back_when_server_ignores_the_field(server: FakeServer) -> None:
    server.state.token_ids_support = "ignored"  # older vLLM: unknown fields are dropped
    backend = server.backend()
    sets = candidate_sets()
    want = np.array(
        [expected_probs(p, list(s), top_m=100) for p, s in zip(PROMPTS, sets, strict=True)]
    )
    assert np.allclose(backend.next_token_probs(PROMPTS, sets), want)
    assert backend.mode == "top_logprobs"


def test_auto_keeps_token_ids_on_a_server_that_has_it(server: FakeServer) -> None:
    backend = server.backend()
    sets = candidate_sets()
    backend.next_token_probs(PROMPTS, sets)
    backend.next_token_probs(PROMPTS, sets)
    assert backend.mode == "token_ids"
    assert all("logprob_token_ids" in r for r in server.state.calls("/v1/completions"))


def test_token_ids_mode_does_not_fall_back(server: FakeServer) -> None:
    server.state.token_ids_support = "rejected"
    with pytest.raises(BackendError, match="HTTP 400"):
        server.backend(mode="token_ids").next_token_probs(PROMPTS, candidate_sets())
    assert len(server.state.calls("/v1/completions")) == 1


def test_token_ids_mode_on_a_server_that_ignores_it_is_an_error(server: FakeServer) -> None:
    server.state.token_ids_support = "ignored"
    with pytest.raises(BackendError, match="ignored logprob_token_ids"):
        server.backend(mode="token_ids").next_token_probs(PROMPTS, candidate_sets())


def test_token_ids_batch_is_split_when_the_union_exceeds_the_cap(server: FakeServer) -> None:
    sets = np.array([ranked(p)[10:15] for p in PROMPTS])  # three disjoint-ish sets of 5
    backend = server.backend(mode="token_ids", max_logprobs=8)
    probs = backend.next_token_probs(PROMPTS, sets)

    want = np.array([expected_probs(p, list(s)) for p, s in zip(PROMPTS, sets, strict=True)])
    assert np.allclose(probs, want)
    requests = server.state.calls("/v1/completions")
    assert len(requests) > 1
    assert all(len(r["logprob_token_ids"]) <= 8 for r in requests)


def test_bad_token_sets_shape_is_rejected(server: FakeServer) -> None:
    with pytest.raises(ValueError, match="token_sets"):
        server.backend().next_token_probs(PROMPTS, np.array([[1, 2]]))


# -- top_k -----------------------------------------------------------------------------------


def toy_is_text(tid: int) -> bool:
    """The toy's text tokens, told apart here on their own: EOS and newlines, and pieces
    that are neither a control token (``<bos>``) nor a control character (C0, C1)."""
    if tid in (EOS, 10, 900):
        return True
    piece = toy_text(tid)
    return not piece.startswith("<") and all(
        unicodedata.category(c) != "Cc" or c in "\t\r" for c in piece
    )


def test_top_k_returns_the_most_probable_text_ids_in_order(server: FakeServer) -> None:
    ids = server.backend().top_k(PROMPTS, 7)
    want = np.array([[t for t in ranked(p) if toy_is_text(int(t))][:7] for p in PROMPTS])
    assert ids.shape == (3, 7)
    assert np.array_equal(ids, want)
    (request,) = server.state.calls("/v1/completions")
    assert request["logprobs"] == 7 + TEXT_MARGIN and request["return_tokens_as_token_ids"]


def test_top_k_leaves_out_control_tokens_and_decodes_each_id_once(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43: a control token among a vLLM server's likeliest candidates could be written
    into a demonstration. Here the server's tokenizer spells two of the prompt's five
    likeliest ids as Gemma's ``<start_of_image>`` and a private-use character: neither is
    offered, the next text ids take their places, and a second call decodes nothing again."""
    prompt = PROMPTS[0]
    natural = ranked(prompt)[:20].tolist()
    monkeypatch.setitem(MULTI, natural[1], "<start_of_image>")
    monkeypatch.setitem(MULTI, natural[4], "\uf071")
    backend = server.backend()
    offered = backend.top_k([prompt], 20)[0].tolist()
    assert natural[1] not in offered and natural[4] not in offered
    rest = [t for t in natural if t not in (natural[1], natural[4])]
    assert offered[:18] == rest and offered[18:] == ranked(prompt)[20:22].tolist()
    decoded = len(server.state.calls("/detokenize"))
    assert decoded >= 20  # each candidate decoded once (and the newline probes)
    assert np.array_equal(backend.top_k([prompt], 20)[0], offered)
    assert len(server.state.calls("/detokenize")) == decoded


def test_top_k_beyond_max_logprobs_fails_before_asking(server: FakeServer) -> None:
    with pytest.raises(BackendError, match="--max-logprobs"):
        server.backend(max_logprobs=20).top_k(PROMPTS, 21)
    assert server.state.calls("/v1/completions") == []


# -- retries and failures --------------------------------------------------------------------


def retrying(backend: LLMBackend, retries: int, sleeps: list[float]) -> RetryingBackend:
    """The backend behind the one retry layer, its waits recorded instead of slept."""
    return RetryingBackend(backend, retry=RetryPolicy(retries, 0.05, sleeps.append))


@pytest.mark.parametrize("status", [503, 429, 500])
def test_transient_statuses_are_retried_once_by_the_retry_layer(
    server: FakeServer, status: int
) -> None:
    server.state.fail_statuses = [status, status]
    with pytest.raises(TransientBackendError, match=f"HTTP {status}"):
        server.backend().top_k(PROMPTS, 3)  # the client alone sends each request once
    assert len(server.state.calls("/v1/completions")) == 1
    sleeps: list[float] = []
    ids = retrying(server.backend(), 4, sleeps).top_k(PROMPTS, 3)
    assert np.array_equal(ids, [ranked(p)[:3] for p in PROMPTS])
    # one failure left for this call, then success: 2 more requests, one wait
    assert len(server.state.calls("/v1/completions")) == 3 and sleeps == [0.05]


def test_retries_give_up_after_the_policy_retries(server: FakeServer) -> None:
    server.state.fail_statuses = [503, 503, 503, 503]
    sleeps: list[float] = []
    with pytest.raises(TransientBackendError, match="HTTP 503: the server failed") as err:
        retrying(server.backend(), 2, sleeps).top_k(PROMPTS, 3)
    assert err.value.status == 503
    assert len(server.state.calls("/v1/completions")) == 3  # not 3 x (1 + the client's own)
    assert sleeps == [0.05, 0.10]
    assert server.url in str(err.value) and "/v1/completions" in str(err.value)


@pytest.mark.parametrize("status", [400, 404, 422])
def test_client_errors_are_final_and_not_retried(server: FakeServer, status: int) -> None:
    server.state.fail_statuses = [status]
    sleeps: list[float] = []
    with pytest.raises(BackendError, match=f"HTTP {status}") as err:
        retrying(server.backend(mode="top_logprobs"), 4, sleeps).top_k(PROMPTS, 3)
    assert not isinstance(err.value, TransientBackendError)
    assert len(server.state.calls("/v1/completions")) == 1 and sleeps == []


def test_connection_refused_is_transient_and_names_the_url() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"  # nothing listens there any more
    sleeps: list[float] = []
    backend = retrying(VLLMHttpBackend(url=url, model=MODEL), 1, sleeps)
    with pytest.raises(TransientBackendError, match="connection failed") as err:
        backend.top_k(PROMPTS, 3)
    assert url in str(err.value) and sleeps == [0.05]


def test_timeout_is_transient_and_retried(server: FakeServer) -> None:
    server.state.completion_sleep_s = 1.0
    sleeps: list[float] = []
    backend = retrying(server.backend(timeout=0.2), 1, sleeps)
    start = time.monotonic()
    with pytest.raises(TransientBackendError, match="timed out") as err:
        backend.top_k(PROMPTS, 3)
    assert time.monotonic() - start < 1.0
    assert server.url in str(err.value)
    assert len(server.state.calls("/v1/completions")) == 2 and sleeps == [0.05]


def test_one_layer_wherever_the_client_is_built(server: FakeServer) -> None:
    # The CLI's make_backend wraps the client in the retry layer ...
    server.state.fail_statuses = [503]
    sleeps: list[float] = []
    cli = make_backend(
        BackendKind.VLLM, model=MODEL, url=server.url, retry=RetryPolicy(2, 0.05, sleeps.append)
    )
    assert cli.top_k(PROMPTS, 3).shape == (3, 3) and sleeps == [0.05]
    assert len(server.state.calls("/v1/completions")) == 2
    # ... the provider of the API and workers hands out the bare client (they wrap it).
    server.state.fail_statuses = [503]
    bare = BackendProvider(BackendKind.VLLM, model=MODEL, url=server.url).get()
    with pytest.raises(TransientBackendError):
        bare.top_k(PROMPTS, 3)
    assert len(server.state.calls("/v1/completions")) == 3


def test_error_messages_do_not_contain_prompt_ids(server: FakeServer) -> None:
    server.state.echo_inputs_in_errors = True
    secret = [[917, 933, 951], [877, 899]]
    with pytest.raises(BackendError, match="HTTP 400") as err:
        server.backend(mode="top_logprobs").next_token_probs(secret, np.array([[5], [6]]))
    message = str(err.value)
    for token in (t for row in secret for t in row):
        assert not re.search(rf"\b{token}\b", message), message
    assert server.url in message


def test_error_messages_do_not_contain_tokenized_text(server: FakeServer) -> None:
    with pytest.raises(BackendError, match="/tokenize: HTTP 400") as err:
        server.backend().tokenize("patient Jane Roe \u2603")  # the fake cannot tokenize the ☃
    assert "Jane" not in str(err.value)


# -- whatever a server quotes, no message carries it (issue 21) ------------------------------

SECRET_TEXT = "Question: patient Zorblax Quimby has condition 7\nType:"
# How real servers quote their input in an error: whole, cut, escaped, as ids, in a list.
QUOTES: dict[str, Callable[[str], Any]] = {
    "whole": lambda text: {"error": {"message": f"cannot tokenize {text}"}},
    "partial": lambda text: {"error": {"message": f"cannot tokenize '…{text[10:40]}…'"}},
    "truncated": lambda text: {"message": f"input too long: {text[:30]}..."},
    "repr": lambda text: {"error": {"message": f"bad input {text!r}"}},
    "json": lambda text: {"error": {"message": f"bad input {json.dumps(text)}"}},
    "ascii": lambda text: {"error": {"message": ascii(text.replace("a", "\u00e4"))}},
    "pydantic": lambda text: {"detail": [{"msg": "bad", "input": text[5:25]}]},
    "param": lambda text: {"error": {"message": "invalid", "param": text}},
    "plain": lambda text: f"Bad Request: {text[8:]}",
}


def _echoing_backend(quote: Callable[[str], Any], status: int = 400) -> VLLMHttpBackend:
    """A backend whose server answers every tokenize or completion with ``status``, quoting
    the request's text (a completion's ids decoded, one character per id) in ``quote``'s
    style."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        prompt = body["prompt"]
        text = prompt if isinstance(prompt, str) else "".join(chr(t) for t in prompt[0])
        quoted = quote(text)
        if isinstance(quoted, str):
            return httpx.Response(status, text=quoted)
        return httpx.Response(status, json=quoted)

    client = httpx.Client(transport=httpx.MockTransport(handle))
    return VLLMHttpBackend(url="http://gpu:8000", model=MODEL, eos_id=EOS, client=client)


def _assert_nothing_quoted(message: str) -> None:
    for word in ("Zorblax", "Quimby", "condition", "Zörbläx"):
        assert word not in message, message
    ids = [str(ord(c)) for c in "Zorblax"]
    assert not re.search(r"\D+".join(ids), message), message


@pytest.mark.parametrize("style", sorted(QUOTES))
@pytest.mark.parametrize("status", [400, 422, 503])
def test_no_message_quotes_what_the_server_echoes(style: str, status: int) -> None:
    backend = _echoing_backend(QUOTES[style], status)
    kind = TransientBackendError if status >= 500 else BackendError
    with pytest.raises(kind) as tokenizing:
        backend.tokenize(SECRET_TEXT)
    backend._bos_prefix = ()  # skip the BOS request: the next call scores at once
    with pytest.raises(kind) as scoring:
        backend.top_k([[ord(c) for c in SECRET_TEXT]], 3)
    for err, endpoint in ((tokenizing, "/tokenize"), (scoring, "/v1/completions")):
        message = str(err.value)
        _assert_nothing_quoted(message)
        assert message.startswith(f"vLLM server http://gpu:8000 {endpoint}: HTTP {status}: ")
        assert err.value.status == status
        assert err.value.__cause__ is None and err.value.__context__ is None


@pytest.mark.parametrize(
    ("server_says", "hint"),
    [
        (
            "Requested sample logprobs of 120, which is greater than max allowed: 20",
            "--max-logprobs",
        ),
        (
            "This model's maximum context length is 4096 tokens. However, you requested",
            "--max-model-len",
        ),
        ("The model `other` does not exist.", "does not serve this model name"),
    ],
)
def test_known_vllm_failures_get_a_fixed_hint_without_the_text(server_says: str, hint: str) -> None:
    backend = _echoing_backend(
        lambda text: {"error": {"message": f"{server_says} ({text})"}}, status=400
    )
    with pytest.raises(BackendError) as err:
        backend.tokenize(SECRET_TEXT)
    message = str(err.value)
    assert hint in message
    assert server_says[:20] not in message
    _assert_nothing_quoted(message)


def test_transport_and_shape_errors_name_the_type_only() -> None:
    def dropped(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError(f"illegal header {SECRET_TEXT}", request=request)

    client = httpx.Client(transport=httpx.MockTransport(dropped))
    backend = VLLMHttpBackend(url="http://gpu:8000", model=MODEL, eos_id=EOS, client=client)
    with pytest.raises(TransientBackendError, match="connection failed") as err:
        backend.tokenize(SECRET_TEXT)
    assert "RemoteProtocolError" in str(err.value)
    _assert_nothing_quoted(str(err.value))

    def odd_index(request: httpx.Request) -> httpx.Response:
        choice = {"index": SECRET_TEXT, "logprobs": {"top_logprobs": [{}]}}
        return httpx.Response(200, json={"choices": [choice]})

    client = httpx.Client(transport=httpx.MockTransport(odd_index))
    backend = VLLMHttpBackend(url="http://gpu:8000", model=MODEL, eos_id=EOS, client=client)
    backend._bos_prefix = ()
    with pytest.raises(BackendError, match="unexpected response shape") as err:
        backend.top_k([[65]], 3)
    _assert_nothing_quoted(str(err.value))


# -- the served model and the start-up check ---------------------------------------------------


def test_without_a_model_the_client_uses_the_one_the_server_serves(server):
    backend = make_backend(BackendKind.VLLM, model=None, url=server.url, retry=None)
    assert isinstance(backend, VLLMHttpBackend) and backend.name == MODEL


@pytest.mark.parametrize("served", [[], [MODEL, "another"]])
def test_a_server_with_no_or_several_models_needs_a_model_named(server, served):
    server.state.served = served
    with pytest.raises(BackendError, match=rf"serves {len(served)} models.*--model"):
        served_model(server.url)


def test_the_start_check_names_the_missing_tokenizer_info_flag(server):
    server.state.tokenizer_info_enabled = False
    with (
        VLLMHttpBackend(url=server.url, model=MODEL) as backend,
        pytest.raises(BackendError, match="--enable-tokenizer-info-endpoint"),
    ):
        backend.check(k=5)


def test_the_start_check_names_a_too_small_max_logprobs(server):
    server.state.max_logprobs = 20
    with (
        VLLMHttpBackend(url=server.url, model=MODEL, max_logprobs=100) as backend,
        pytest.raises(BackendError, match="--max-logprobs 100 or more"),
    ):
        backend.check(k=100)


def test_the_start_check_passes_on_a_well_configured_server(server):
    with VLLMHttpBackend(url=server.url, model=MODEL) as backend:
        backend.check(k=10)
    assert server.state.calls("/v1/completions")  # it did score a prompt
