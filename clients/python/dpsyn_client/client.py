"""The Python client of downstream apps: fetch synthesised prompts by ID, keep them, use them.

An app that serves a dpsyn prompt asks for it on every request it answers, so the client
keeps each prompt it fetched (an in-process LRU of :data:`DEFAULT_CACHE_SIZE` prompts) and
revalidates it on every :meth:`PromptClient.get_prompt`: it sends the stored ETag in
``If-None-Match``, and on ``304 Not Modified`` (no body) returns the stored prompt. It always
asks the server rather than trusting a time-to-live, because the answer is cheap (the server
caches the body and its ETag) and because asking is what makes a revoked key or a disabled
tenant stop the app at once (401) instead of after some expiry; the one thing of a prompt
that changes after it is stored, its validation score, then arrives with a new ETag.

A prompt is rendered for chat models by :func:`dpsyn_client.chat.chat_messages`, the function
the API's ``?format=messages`` uses, so local rendering and the API agree. This package
imports only httpx: it is the `dpsyn-client` distribution (clients/python), which an app
installs alone.

Errors are raised, never swallowed: :class:`ApiError` for an error answer (its HTTP status,
the API's error code and message), :class:`UnreachableError` when no answer came (its cause
is the httpx error), :class:`dpsyn_client.chat.NoChatFormError` for the messages of a soft prompt.
Pass ``http=`` an ``httpx.Client`` of your own (connection pool, proxies, or FastAPI's
``TestClient`` in tests); the client then never closes it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from dpsyn_client.chat import ChatMessage, NoChatFormError, chat_messages

__all__ = [
    "ApiError",
    "ChatMessage",
    "DpsynClientError",
    "NoChatFormError",
    "Prompt",
    "PromptClient",
    "UnreachableError",
]

#: Seconds a request may take when the client makes its own ``httpx.Client``.
DEFAULT_TIMEOUT_S = 60.0
#: Most prompts kept per client (least recently used ones are dropped first).
DEFAULT_CACHE_SIZE = 256


class DpsynClientError(Exception):
    """Anything the client raises about the server's answer (or its absence)."""


class ApiError(DpsynClientError):
    """The server answered with an error status: ``status`` (HTTP), ``code`` (the API's error
    code, e.g. ``not_found``; None if the body was not the API's error JSON), ``message``,
    ``details`` (the error's other fields) and the ``response`` itself."""

    def __init__(
        self,
        status: int,
        code: str | None,
        message: str,
        response: httpx.Response,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{message} ({code or 'error'}, HTTP {status})")
        self.status, self.code, self.message = status, code, message
        self.response = response
        self.details = details or {}

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """The error the API's body ``{"error": {"code", "message", ...}}`` describes; for a
        body that is not that (a proxy's page), the status and its reason phrase."""
        try:
            error = dict(response.json()["error"])
            message, code = str(error.pop("message")), error.pop("code", None)
        except (ValueError, KeyError, TypeError):
            reason = response.reason_phrase or "error"
            return cls(
                response.status_code, None, f"HTTP {response.status_code} {reason}", response
            )
        return cls(response.status_code, code, message, response, error)


class UnreachableError(DpsynClientError):
    """No answer came from the server (refused, DNS, timeout); ``__cause__`` is httpx's."""

    def __init__(self, url: str, error: httpx.TransportError) -> None:
        shown = without_credentials(url)
        super().__init__(f"cannot reach the dpsyn server at {shown} ({type(error).__name__})")
        self.url = shown


def without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``: a message or a log line
    that names the server never prints a secret put in its URL."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class Prompt:
    """A synthesised prompt as ``GET /v1/prompts/{id}`` answers it (``data``, the API's JSON)
    and the ETag it came with (None if the server sent none: then it is never revalidated)."""

    data: dict[str, Any]
    etag: str | None = None

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def text(self) -> str:
        """The prompt as plain text: the instruction and demonstrations, ready for a query."""
        return str(self.data["prompt"])

    @property
    def demonstrations(self) -> list[dict[str, str]]:
        return list(self.data.get("demonstrations") or [])

    @property
    def notes(self) -> list[str]:
        """What to know about the prompt that its demonstrations do not show, in sentences
        (e.g. demonstrations that came out empty and were left out); [] when nothing."""
        return [str(note) for note in self.data.get("notes") or []]

    @property
    def task_spec(self) -> dict[str, Any]:
        return dict(self.data.get("task_spec") or {})

    @property
    def is_soft_prompt(self) -> bool:
        """A PromptDPSGD soft prompt: embeddings, no text demonstrations and no chat form."""
        return bool(self.data.get("soft_prompt"))

    def messages(self, query: str | None = None) -> list[ChatMessage]:
        """The prompt as chat messages, ``query`` as the last user turn if given
        (:func:`dpsyn_client.chat.chat_messages`; a soft prompt raises :class:`NoChatFormError`)."""
        return chat_messages(self.data, query)


class PromptClient:
    """Reads prompts of one dpsyn server with one API key (a ``prompts:read`` key suffices).

    ``url`` is the server's base URL (a trailing ``/v1`` is dropped); safe to share between
    threads (the cache has a lock; httpx clients are thread-safe)."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        http: httpx.Client | None = None,
        timeout: float | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        if not key:
            raise ValueError("no API key: create one with 'dpsyn keys create' (prompts:read)")
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, got {cache_size}")
        self.url = url.rstrip("/").removesuffix("/v1")
        self._headers = {"Authorization": f"Bearer {key}"}
        self._owns_http = http is None
        self._http = http or httpx.Client(timeout=timeout or DEFAULT_TIMEOUT_S)
        self._timeout = timeout
        self._cache: OrderedDict[str, Prompt] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def __enter__(self) -> PromptClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP client if this client made it (an injected one is the caller's)."""
        if self._owns_http:
            self._http.close()

    def _path(self, prompt_id: str, suffix: str = "") -> str:
        if not prompt_id:
            raise ValueError("no prompt ID: give a job's prompt_id")
        return f"{self.url}/v1/prompts/{quote(prompt_id, safe='')}{suffix}"

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One request; an error status raises :class:`ApiError`, no answer
        :class:`UnreachableError`. A 304 is returned (it is not an error)."""
        if self._timeout is not None:
            kwargs["timeout"] = self._timeout
        try:
            response = self._http.request(method, url, **kwargs)
        except httpx.TransportError as error:
            raise UnreachableError(self.url, error) from error
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return response

    def _cached(self, prompt_id: str) -> Prompt | None:
        with self._lock:
            prompt = self._cache.get(prompt_id)
            if prompt is not None:
                self._cache.move_to_end(prompt_id)
            return prompt

    def _keep(self, prompt_id: str, prompt: Prompt) -> None:
        with self._lock:
            self._cache[prompt_id] = prompt
            self._cache.move_to_end(prompt_id)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def get_prompt(self, prompt_id: str) -> Prompt:
        """The prompt ``prompt_id``, revalidated: a stored copy is sent back as an ETag and
        reused on 304; any other answer replaces it (or raises, keeping nothing new)."""
        url, cached = self._path(prompt_id), self._cached(prompt_id)
        headers = dict(self._headers)
        if cached is not None and cached.etag is not None:
            headers["If-None-Match"] = cached.etag
        response = self._send("GET", url, headers=headers)
        if response.status_code == 304:
            if cached is not None:
                return cached
            # A 304 for a tag we did not send (a proxy's doing): ask again without one.
            response = self._send("GET", url, headers=self._headers)
        prompt = Prompt(_json(response), response.headers.get("etag"))
        self._keep(prompt_id, prompt)
        return prompt

    def messages(self, prompt_id: str, query: str | None = None) -> list[ChatMessage]:
        """The prompt's chat messages (``query`` last if given), from a revalidated copy."""
        return self.get_prompt(prompt_id).messages(query)

    def complete(self, prompt_id: str, query: str, *, calibrated: bool = False) -> dict[str, Any]:
        """Answer ``query`` with the prompt on the server's model (``POST .../complete``):
        classification ``{"label", "scores", "calibration"}``, extraction ``{"value"}``, with
        ``prompt_id`` and ``kind``. ``calibrated``: contextual calibration of the label scores
        (classification). Never cached: the query is the app's input."""
        body: dict[str, Any] = {"query": query, **({"calibrated": True} if calibrated else {})}
        response = self._send(
            "POST", self._path(prompt_id, "/complete"), headers=self._headers, json=body
        )
        return _json(response)


def _json(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a successful answer; a body that is not one raises (a proxy's page
    with status 200 must not pass for a prompt)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise DpsynClientError(
            f"the answer to {response.request.method} {response.request.url.path} "
            f"(HTTP {response.status_code}) is not a JSON object"
        )
    return body
