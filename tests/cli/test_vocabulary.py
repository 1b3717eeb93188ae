"""The API's field names and routes in the CLI's words (:mod:`app.cli.vocabulary`), the URL
the client calls, and the one line it prints for a server error."""

from __future__ import annotations

import httpx
import pytest

from app.cli import app as cli_app
from app.cli.config import base_url
from app.cli.http_client import server_message
from app.cli.vocabulary import in_cli_words


@pytest.mark.parametrize(
    ("api", "cli"),
    [
        (
            "dataset 'd1' has no budget: set one with PUT /v1/datasets/d1/budget",
            "dataset 'd1' has no budget: set one with 'dpsyn budget set d1 --epsilon TOTAL'",
        ),
        (
            "the dataset has no budget: set one with PUT /v1/datasets/{id}/budget",
            "the dataset has no budget: set one with 'dpsyn budget set ID --epsilon TOTAL'",
        ),
        (
            "public_dataset_id: required for method promptpate (the ID of the public dataset)",
            "--public-dataset: required for method promptpate (the ID of the public dataset)",
        ),
        (
            "has running job(s) j1: cancel them (POST /v1/jobs/{id}/cancel) and wait",
            "has running job(s) j1: cancel them ('dpsyn jobs cancel ID') and wait",
        ),
        (
            "params.max_public: too big; shots: too small",
            "--max-public: too big; --shots: too small",
        ),
        ("params.M: Input should be a valid integer", "--M: Input should be a valid integer"),
        ("limit (query): at most 500", "--limit: at most 500"),
        ("task: required for a private dataset", "--task: required for a private dataset"),
        ("text_column: no such column", "--text-col: no such column"),
        # Words before a colon that are no field, and fields not at a part's start: unchanged.
        ("unknown task 'x': not built in", "unknown task 'x': not built in"),
        ("invalid job parameters: a b", "invalid job parameters: a b"),
        ("the epsilon: 3", "the epsilon: 3"),
        # an org key's refusal: once "ask GET /v1/budgets?--all-tenants" (issue 43)
        (
            "an org:read key may only read every tenant's budgets (GET "
            "/v1/budgets?all_tenants=true, GET /v1/fleet/ledgers.csv) and nothing else",
            "an org:read key may only read every tenant's budgets ('dpsyn budget list "
            "--all-tenants', GET /v1/fleet/ledgers.csv) and nothing else",
        ),
    ],
)
def test_fields_and_routes_become_options_and_commands(api, cli):
    assert in_cli_words(api) == cli


def _response(status: int, body: object, path: str = "/v1/jobs") -> httpx.Response:
    request = httpx.Request("POST", "http://127.0.0.1:8000" + path)
    return httpx.Response(status, json=body, request=request)


def test_a_server_error_is_one_line_in_cli_words_with_its_code():
    body = {"error": {"code": "invalid", "message": "public_dataset_id: required\nfor x"}}
    assert server_message(_response(422, body), "http://127.0.0.1:8000") == (
        "--public-dataset: required for x (invalid, HTTP 422)"
    )


def test_a_route_the_server_lacks_is_explained():
    body = {"error": {"code": "not_found", "message": "Not Found"}}
    message = server_message(_response(404, body, "/api/v1/jobs"), "http://h:1/api")
    assert message.startswith("the server at http://h:1/api has no route POST /api/v1/jobs")
    assert "--url (DPSYN_URL) must be the dpsyn server's base URL" in message
    named = {"error": {"code": "not_found", "message": "job 'x' not found"}}
    assert server_message(_response(404, named), "u") == "job 'x' not found (not_found, HTTP 404)"


def test_a_trailing_v1_is_dropped_and_said():
    assert base_url("http://h:8000/v1/") == (
        "http://h:8000",
        "using http://h:8000: the server URL is given without /v1 (the client adds it)",
    )
    assert base_url("https://h/dpsyn/") == ("https://h/dpsyn", None)
    assert base_url("127.0.0.1:8741") == (
        "http://127.0.0.1:8741",
        "using http://127.0.0.1:8741: a server URL without a scheme is taken as http://",
    )


# The request schemas a ``dpsyn`` client command sends. AdviceCreate is left out: advice runs
# are measured locally (``dpsyn advise``), no client command posts one.
CLI_REQUESTS = (
    "DatasetCreate",
    "DatasetUploadForm",
    "CountsPublicUpdate",
    "BudgetUpdate",
    "JobCreate",
    "CompletionRequest",
    "KeyCreate",
)


def _cli_options() -> set[str]:
    """Every option of every ``dpsyn`` command, as typed."""
    import typer.main

    found: set[str] = set()

    def walk(command) -> None:
        for param in getattr(command, "params", []):
            found.update(opt for opt in param.opts if opt.startswith("--"))
        for child in getattr(command, "commands", {}).values():
            walk(child)

    walk(typer.main.get_command(cli_app))
    return found


def test_every_field_a_cli_user_sets_has_its_cli_words(server):
    """Issue 34: a field without an entry reaches the user as the API names it
    (``validation_dataset_id: ...``). Every field of the request schemas the client sends,
    and every query parameter of the API, has an entry, and an option entry is a real one."""
    from app.api import schemas
    from app.cli.vocabulary import FIELD_OPTIONS

    fields = {
        name
        for model in CLI_REQUESTS
        for name in getattr(schemas, model).model_fields
        if name != "params"  # a container: its members are --NAME options
    }
    query = {
        parameter["name"]
        for path, operations in httpx.get(server + "/openapi.json").json()["paths"].items()
        if not path.startswith("/ui")
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "query"
    }
    assert sorted((fields | query) - set(FIELD_OPTIONS)) == []
    options = _cli_options()
    made_up = [o for o in FIELD_OPTIONS.values() if o.startswith("--") and o not in options]
    assert made_up == []


@pytest.mark.parametrize(
    ("api", "cli"),
    [
        (
            "validation_dataset_id: dataset 'nope' not found",
            "--validation-dataset: dataset 'nope' not found",
        ),
        (
            "validation_dataset_id: private (upload it with public=true and labelled=true)",
            "--validation-dataset: private (upload it with --public and --labelled)",
        ),
        ("warn_threshold: at most 1", "--warn: at most 1"),
        ("format=true stays", "format=true stays"),  # not an option: left as it is
        (
            "is public (a validation set: name it as validation_dataset_id); a job",
            "is public (a validation set: name it as --validation-dataset); a job",
        ),
        ("(the API's text_column and label_column)", "(the API's text_column and label_column)"),
        ("label_counts of the task", "label_counts of the task"),
    ],
)
def test_validation_set_mistakes_speak_cli(api, cli):
    assert in_cli_words(api) == cli
