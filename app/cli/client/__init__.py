"""Client commands of a running dpsyn server: ``dpsyn datasets|budget|jobs|prompts ...``.

Every command takes ``--url`` (``DPSYN_URL``) and ``--key`` (``DPSYN_API_KEY``); without them
the URL and key ``dpsyn serve`` saved in ``./.dpsyn/`` are used, else the user's config
(``~/.config/dpsyn/config.toml``, ``dpsyn config set``), else http://127.0.0.1:8000
(:mod:`app.cli.config`).
A server error is printed as its message on one line, in the CLI's words (options and
commands, :mod:`app.cli.vocabulary`), and the command exits with status 1 (2 for a usage or
local file problem). ``--json`` prints the server's JSON instead of text; ``-q`` prints only
the ID of what was created. The HTTP client is :mod:`app.cli.http_client`; ``dpsyn keys`` is
in :mod:`app.cli.keys`. Each group's commands (upload, list, show, delete ...) are all here,
so that importing a group brings every one of its commands. ``prompts get`` and
``prompts complete`` go through the downstream apps' client (:mod:`dpsyn_client.client`), so the CLI
exercises what an app uses.
"""

from app.cli.client.budget import budget_app
from app.cli.client.datasets import datasets_app
from app.cli.client.jobs import jobs_app
from app.cli.client.prompts import prompts_app

__all__ = ["budget_app", "datasets_app", "jobs_app", "prompts_app"]
