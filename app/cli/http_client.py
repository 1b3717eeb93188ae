"""The one HTTP client of the ``dpsyn`` client commands, and what they share: the ``--url``,
``--key`` and ``--json`` options as the option groups :class:`Server` and :class:`Reply`
(a command takes ``server: Reply`` and calls ``server.request`` and ``server.show``), ``-q``
and ``--yes``, one-line errors, plain-text tables.

A server error is printed as its message on one line, in the CLI's vocabulary (options and
``dpsyn`` commands, not request fields and routes: :mod:`app.cli.vocabulary`), and the command
exits with status 1 (2 for a usage or local file problem).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

import httpx
import typer
from dpsyn_client.client import (
    ApiError,
    NoChatFormError,
    PromptClient,
    UnreachableError,
    without_credentials,
)
from rich.console import Console

from app.cli.config import ConfigError, base_url, resolve, user_config_path
from app.cli.vocabulary import in_cli_words
from app.tls import client_context

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class ClientError(Exception):
    """What to print (one line) and the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def exit_with(error: ClientError) -> NoReturn:
    err.print(f"error: {error.message}", markup=False)
    raise typer.Exit(code=error.code)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def resolve_target(url: str | None, key: str | None) -> tuple[str, str]:
    """The server URL and API key (see :mod:`app.cli.config` for the order)."""
    try:
        resolved_url, resolved_key, _ = resolve(url, key)
    except ConfigError as error:
        raise ClientError(str(error), code=2) from None
    if not resolved_key:
        raise ClientError(
            "no API key: pass --key, set DPSYN_API_KEY, run 'dpsyn serve' in this directory "
            "(it saves the admin key to ./.dpsyn/admin_key), or save one with 'dpsyn config "
            f"set --url URL --key-file FILE' ({user_config_path()})",
            code=2,
        )
    return resolved_url, resolved_key


class Api:
    """A thin JSON client; raises :class:`ClientError` with the server's message.

    A URL ending in the API's ``/v1`` (copied from the API docs) is cut back to the server's
    base URL, with a note on stderr: every route the client calls starts with ``/v1`` already,
    and ``/v1/v1/...`` would answer a bare 404."""

    def __init__(self, url: str | None, key: str | None, *, timeout: float = 300.0) -> None:
        resolved_url, resolved_key = resolve_target(url, key)
        self.url, note = base_url(resolved_url)
        self.key = resolved_key
        if note:
            err.print(f"note: {note}", markup=False)
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {resolved_key}"},
            timeout=timeout,
            verify=client_context(),
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise ClientError(unreachable(self.url, error)) from None
        if response.status_code >= 400:
            raise ClientError(server_message(response, self.url))
        return response

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def download(self, path: str, params: dict[str, str] | None = None) -> httpx.Response:
        """A GET whose body is a file (not JSON); errors as :meth:`call`."""
        return self._send("GET", path, params=params)


def unreachable(url: str, error: BaseException) -> str:
    """Why the server could not be reached, and what to try: an https URL whose server
    answers plain HTTP fails its TLS handshake, which is not a server that is down. The
    URL is shown without any ``user:password@`` in it."""
    url = without_credentials(url)
    if url.startswith("https://") and _tls_failed(error):
        plain = "http://" + url.removeprefix("https://")
        return (
            f"the dpsyn server at {url} did not answer HTTPS (the TLS handshake failed); "
            f"if it serves plain HTTP ('dpsyn serve' does), use --url {plain}"
        )
    return (
        f"cannot reach the dpsyn server at {url} ({type(error).__name__}); "
        "is 'dpsyn serve' running? (--url / DPSYN_URL)"
    )


def _tls_failed(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a TLS failure."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "SSL" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def server_message(response: httpx.Response, url: str) -> str:
    """The server's error as one line in the CLI's words, with its code and status.

    A 404 that names no resource (the API's answer to a route it does not have) says what
    that usually means: a ``--url`` with a path, or a server older than this client."""
    try:
        body = response.json()
        message = body["error"]["message"]
        code = body["error"].get("code")
    except (ValueError, KeyError, TypeError):
        reason = response.reason_phrase or "error"
        message, code = f"HTTP {response.status_code} {reason} from {response.request.url}", None
    if response.status_code == 404 and code in (None, "not_found") and message == "Not Found":
        return (
            f"the server at {url} has no route {response.request.method} "
            f"{response.request.url.path} (HTTP 404): --url (DPSYN_URL) must be the dpsyn "
            "server's base URL, e.g. http://127.0.0.1:8000 with no path, and the server as "
            "new as this client"
        )
    suffix = f" ({code}, HTTP {response.status_code})" if code else ""
    return in_cli_words(one_line(message)) + suffix


UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="DPSYN_URL",
        help="Server URL (default: ./.dpsyn/url, saved by 'dpsyn serve'; else the user config, "
        "'dpsyn config set'; else http://127.0.0.1:8000).",
        show_default=False,
    ),
]
KeyOpt = Annotated[
    str | None,
    typer.Option(
        "--key",
        envvar="DPSYN_API_KEY",
        help="API key (default: ./.dpsyn/admin_key, saved by 'dpsyn serve'; else the user config).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json/--no-json", help="Print the server's JSON.")]
QuietOpt = Annotated[bool, typer.Option("--quiet/--no-quiet", "-q", help="Print only the ID.")]
YesOpt = Annotated[bool, typer.Option("--yes/--no-yes", "-y", help="Do not ask for confirmation.")]


@dataclass(frozen=True)
class Server:
    """The server a client command calls: ``--url`` and ``--key``, declared once; a command
    takes a parameter of this type (``server: Server``) and
    :func:`app.cli.options.with_groups` lays the options out in its place."""

    url: UrlOpt = None
    key: KeyOpt = None

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One API call; a server or connection error ends the command with its message."""
        with self.session() as api:
            return api.call(method, path, **kwargs)

    @contextmanager
    def session(self) -> Iterator[Api]:
        """A connection for several calls; a :class:`ClientError` raised in the ``with``
        block (the server's, or the command's own) ends the command with its message."""
        try:
            with Api(self.url, self.key) as api:
                yield api
        except ClientError as error:
            exit_with(error)

    @contextmanager
    def prompt_client(self) -> Iterator[PromptClient]:
        """The downstream apps' client (:mod:`dpsyn_client.client`) on this connection, so
        that ``dpsyn prompts get|complete`` read prompts as an app does; its errors end the
        command as :class:`Api`'s do (one line in the CLI's words, exit status 1)."""
        with self.session() as api:
            try:
                yield PromptClient(api.url, api.key, http=api.http)
            except ApiError as error:
                raise ClientError(server_message(error.response, api.url)) from None
            except UnreachableError as error:
                raise ClientError(unreachable(api.url, error.__cause__ or error)) from None
            except NoChatFormError as error:
                raise ClientError(in_cli_words(one_line(str(error)))) from None


@dataclass(frozen=True)
class Reply(Server):
    """:class:`Server` and ``--json``: a command that prints the server's JSON or its own
    text of it."""

    as_json: JsonOpt = False

    def show(self, value: Any, as_text: Callable[[Any], object]) -> None:
        """Print ``value``: its JSON with ``--json``, else ``as_text(value)``."""
        if self.as_json:
            print_json(value)
        else:
            as_text(value)


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


def print_rows(header: list[str], rows: list[list[str]]) -> None:
    """Aligned plain-text columns (never truncated, unlike a table fitted to the terminal)."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        typer.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def confirm(question: str, yes: bool) -> None:
    """Go on if ``--yes`` was given or the user answers y; else end the command (exit 1)
    having changed nothing. Without a terminal the answer is read from stdin (``echo y |``)."""
    if yes:
        return
    try:
        agreed = typer.confirm(question, default=False, err=True)
    except typer.Abort:  # no answer: end of input
        agreed = False
    if not agreed:
        exit_with(ClientError("nothing changed (answer y, or pass --yes)"))
