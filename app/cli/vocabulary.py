"""The API's words in the CLI's: request field names become command options and routes
become ``dpsyn`` commands, in every server error the client commands print.

The server's messages are written for any client, so they name what an HTTP caller sends
(``public_dataset_id: required``, ``set one with PUT /v1/datasets/ID/budget``). A CLI user never
typed either: they typed ``--public-dataset`` and know ``dpsyn budget set``. The two tables
below are the one place that maps one vocabulary to the other; a message that names neither
passes unchanged. The translation only rewrites names, so it never adds record text to a
message (and the server's messages carry none).
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: A request field (JSON body, form field or query parameter) -> the option that sets it.
FIELD_OPTIONS: dict[str, str] = {
    "dataset_id": "--dataset",
    "public_dataset_id": "--public-dataset",
    "epsilon": "--epsilon",
    "delta": "--delta",
    "accounting": "--accounting",
    "shots": "--shots",
    "method": "--method",
    "task": "--task",
    "text_column": "--text-col",
    "label_column": "--label-col",
    "name": "--name",
    "public": "--public",
    "query": "--query",
    "calibrated": "--calibrated",
    "scope": "--scope",
    "status": "--status",
    "limit": "--limit",
    "offset": "--offset",
    "warn_threshold": "--warn",
    "counts_public": "--public-counts",
    "budget_of": "--budget-of",
    "labelled": "--labelled",
    "validation_dataset_id": "--validation-dataset",
    "over_threshold": "--over-threshold",
    "all_tenants": "--all-tenants",
    "tenant": "--tenant",
    "include_deleted": "--include-deleted",
    # Set by the file, not by an option: what the upload sends from it.
    "records": "the file",
    "format": "the file's suffix",
}


_ID = r"(\{id\}|\{[a-z_]+_id\}|[A-Za-z0-9_.-]+)"

#: A route named in a message -> the command that does the same (``{0}``: the route's ID,
#: ``ID`` when the message names a placeholder).
ROUTE_COMMANDS: list[tuple[re.Pattern[str], str]] = [
    # before the field rules, which would leave "GET /v1/budgets?--all-tenants"
    (re.compile(r"GET /v1/budgets\?all_tenants=true"), "'dpsyn budget list --all-tenants'"),
    (re.compile(rf"PUT /v1/datasets/{_ID}/budget\b"), "'dpsyn budget set {0} --epsilon TOTAL'"),
    (re.compile(rf"GET /v1/datasets/{_ID}/budget\b"), "'dpsyn budget show {0}'"),
    (
        re.compile(rf"PUT /v1/datasets/{_ID}/counts-public\b"),
        "'dpsyn datasets counts-public {0}'",
    ),
    (re.compile(rf"POST /v1/jobs/{_ID}/cancel\b"), "'dpsyn jobs cancel {0}'"),
    (re.compile(rf"GET /v1/jobs/{_ID}\b"), "'dpsyn jobs show {0}'"),
    (re.compile(r"POST /v1/jobs\b"), "'dpsyn jobs submit'"),
    (re.compile(rf"DELETE /v1/datasets/{_ID}\b"), "'dpsyn datasets delete {0}'"),
    (re.compile(rf"GET /v1/datasets/{_ID}\b"), "'dpsyn datasets show {0}'"),
    (re.compile(r"POST /v1/datasets\b"), "'dpsyn datasets upload'"),
    (re.compile(rf"GET /v1/prompts/{_ID}/soft-prompt\b"), "'dpsyn prompts download {0}'"),
    (re.compile(rf"POST /v1/prompts/{_ID}/complete\b"), "'dpsyn prompts complete {0}'"),
    (re.compile(rf"GET /v1/prompts/{_ID}\b"), "'dpsyn prompts get {0}'"),
    (re.compile(rf"DELETE /v1/keys/{_ID}\b"), "'dpsyn keys revoke {0}'"),
    (re.compile(r"POST /v1/keys\b"), "'dpsyn keys create'"),
]

# A field named at the start of a message or of one of its "; "-separated parts, before ":"
# (how the API names the field a problem is about), with an optional "body."/"params." path
# and the " (query)" the API adds to a query parameter.
_FIELD = re.compile(
    r"(^|; )(?:body\.)?(params\.)?([A-Za-z][A-Za-z0-9_]*)(?: \((?:query|path|header|cookie)\))?"
    r"(?=:)"
)


def _option(match: re.Match[str]) -> str:
    start, param, name = match.group(1), match.group(2), match.group(3)
    if param:  # a method parameter: the CLI takes it as --NAME VALUE
        return f"{start}--{name.replace('_', '-')}"
    option = FIELD_OPTIONS.get(name)
    return f"{start}{option}" if option else match.group(0)


def _command(template: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        ident = match.group(1) if match.groups() else ""
        return template.format("ID" if ident.startswith("{") else ident)

    return replace


# A boolean field set in the API's words (``upload it with public=true``), and an ID field
# named inside a sentence (``name it as validation_dataset_id``): only ``*_id`` names, which
# no English word is, so "name", "task" or a message's "the API's text_column" stay as said.
_TRUE = re.compile(r"\b([a-z][a-z_]*)=true\b")
_SNAKE = re.compile(r"(?<![\w.-])([a-z]+(?:_[a-z]+)*_id)\b(?![=(]|\.\w)")


def _flag(match: re.Match[str]) -> str:
    option = FIELD_OPTIONS.get(match.group(1))
    return option if option and option.startswith("--") else match.group(0)


def in_cli_words(message: str) -> str:
    """``message`` with the API's field names and routes replaced by the CLI's options and
    commands (unchanged when it names none)."""
    for pattern, template in ROUTE_COMMANDS:
        message = pattern.sub(_command(template), message)
    return _SNAKE.sub(_flag, _TRUE.sub(_flag, _FIELD.sub(_option, message)))
