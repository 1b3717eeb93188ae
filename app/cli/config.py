"""Where the client commands find the server and the key, and ``dpsyn config set|show``.

In order, for the URL and the key separately:

1. ``--url`` / ``--key``, then ``DPSYN_URL`` / ``DPSYN_API_KEY``;
2. the folder ``dpsyn serve`` ran in: ``./.dpsyn/admin_key`` and ``./.dpsyn/url`` (written by
   ``dpsyn serve``, so ``--port`` needs no repeating);
3. the user's config, ``$XDG_CONFIG_HOME/dpsyn/config.toml`` (``~/.config/dpsyn/``; or the file
   ``DPSYN_CONFIG`` names), written by ``dpsyn config set``;
4. the URL defaults to http://127.0.0.1:8000; a key has no default.

Steps 2 and 3 are taken as a pair: the folder's state is used when it holds a key, else the
user's config, so that a URL and a key of two different servers are never combined. The config
holds a key, so it is written private (0600, folder 0700); ``config show`` masks it.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_URL = "http://127.0.0.1:8000"
LOCAL_STATE = Path(".dpsyn")
LOCAL_KEY, LOCAL_URL = "admin_key", "url"


class ConfigError(Exception):
    """A config file that cannot be read; the message names it."""


def user_config_path() -> Path:
    """``$DPSYN_CONFIG``, else ``$XDG_CONFIG_HOME/dpsyn/config.toml`` (``~/.config``)."""
    if os.environ.get("DPSYN_CONFIG"):
        return Path(os.environ["DPSYN_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "dpsyn" / "config.toml"


@dataclass(frozen=True)
class Source:
    """Where a URL and key came from (``where`` is shown by ``config show``)."""

    where: str
    url: str | None = None
    key: str | None = None


def _read_text(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def local_source(state: Path = LOCAL_STATE) -> Source:
    return Source(
        where=str(state), url=_read_text(state / LOCAL_URL), key=_read_text(state / LOCAL_KEY)
    )


def user_source() -> Source:
    path = user_config_path()
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return Source(where=str(path))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    values = {name: data.get(name) for name in ("url", "key")}
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{path}: {name} must be a string")
    return Source(where=str(path), url=values["url"], key=values["key"])


def resolve(url: str | None, key: str | None) -> tuple[str, str | None, Source | None]:
    """The URL and key to use, and the saved source they were completed from (if any)."""
    source: Source | None = None
    if url is None or key is None:
        local = local_source()
        if local.key:
            source = local
        else:
            user = user_source()
            source = user if (user.url or user.key) else None
    resolved_url = url or (source.url if source else None) or DEFAULT_URL
    resolved_key = key or (source.key if source else None)
    return resolved_url, resolved_key, source


def base_url(url: str) -> tuple[str, str | None]:
    """The server's base URL, and a note when ``url`` had to be cut back to it.

    Every route starts with ``/v1``, so a URL copied from the API docs (``.../v1``) would make
    each call ``/v1/v1/...`` and get a bare 404: the ``/v1`` is dropped, and said."""
    trimmed = url.rstrip("/")
    if "://" not in trimmed:  # 127.0.0.1:8741: httpx would call it an unsupported scheme
        base, _ = base_url("http://" + trimmed)
        return base, f"using {base}: a server URL without a scheme is taken as http://"
    if trimmed.endswith("/v1"):
        base = trimmed.removesuffix("/v1")
        return base, f"using {base}: the server URL is given without /v1 (the client adds it)"
    return trimmed, None


def write_user_config(url: str, key: str | None) -> Path:
    """Write the user's config (private); returns its path."""
    path = user_config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lines = [f"url = {json.dumps(url)}"]  # a JSON string is a valid TOML basic string
    if key:
        lines.append(f"key = {json.dumps(key)}")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write("# dpsyn client: the server and API key (dpsyn config set)\n")
        handle.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


def mask(key: str) -> str:
    return key[:10] + "..." if len(key) > 16 else "***"


config_app = typer.Typer(
    help="The client's saved server URL and API key (~/.config/dpsyn/config.toml).",
    no_args_is_help=True,
)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


@config_app.command("set")
def config_set(
    url: Annotated[str, typer.Option("--url", help="The server, e.g. https://dpsyn.example.")],
    key: Annotated[
        str | None, typer.Option("--key", help="API key (visible in shell history).")
    ] = None,
    key_file: Annotated[
        str | None,
        typer.Option("--key-file", help="Read the API key from this file ('-': stdin)."),
    ] = None,
) -> None:
    """Save the server URL and API key for the client commands, in any folder."""
    if key is not None and key_file is not None:
        raise _fail("give --key or --key-file, not both")
    if not url.startswith(("http://", "https://")):
        raise _fail(f"--url must start with http:// or https://, got {url!r}")
    if key_file is not None:
        try:
            text = sys.stdin.read() if key_file == "-" else Path(key_file).read_text()
        except OSError as error:
            raise _fail(f"cannot read {key_file}: {error.strerror}") from None
        key = text.strip()
        if not key:
            raise _fail(f"{key_file}: no key in it")
    url, note = base_url(url)
    if note:
        typer.echo(f"note: {note}", err=True)
    path = write_user_config(url, key)
    typer.echo(f"saved {url} {'and its API key ' if key else ''}to {path}", err=True)


@config_app.command("show")
def config_show(
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            envvar="DPSYN_URL",
            help="A URL as a client command takes it: first, before any saved one.",
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            envvar="DPSYN_API_KEY",
            help="A key as a client command takes it: first (shown masked).",
        ),
    ] = None,
) -> None:
    """Which URL and key the client commands would use here, and where they come from."""
    try:
        resolved_url, resolved_key, source = resolve(url, key)
    except ConfigError as error:
        raise _fail(str(error)) from None
    origin = source.where if source else "defaults"
    typer.echo(f"url: {resolved_url}")
    typer.echo(f"key: {mask(resolved_key) if resolved_key else '(none)'}")
    typer.echo(f"from: {'flags/environment, then ' if url or key else ''}{origin}")
    typer.echo(f"user config: {user_config_path()}")
