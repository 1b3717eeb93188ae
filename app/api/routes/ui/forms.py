"""The dashboard's forms: what each offers, and its fields turned into the API's own requests.

Each parser validates with the API's schema (``JobCreate``, ``DatasetUploadForm``,
``BudgetUpdate``), so a form accepts and refuses exactly what the API would, and its refusal
is one line naming the field (as the API's 422 does), never the value typed in: a form field
may hold private text.

The job form is generated from the method registry (:mod:`app.methods.registry`): its method
choices, each method's parameter inputs and the parameters a submission sends, so a method
added to the registry appears with its parameters without an edit here or in the templates.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import FormData, UploadFile

from app.api.errors import describe_request_errors
from app.api.schemas import AdviceCreate, BudgetUpdate, DatasetUploadForm, JobCreate
from app.methods import registry
from app.privacy.accounting import Accounting
from app.privacy.budget import warn_fraction
from app.services.errors import InvalidError
from app.services.job_request import JobRequest
from app.synthesis.config import default_shots

MAX_QUERY_CHARS = 20_000
_UPLOAD_TEXT_FIELDS = ("name", "task", "text_column", "label_column", "format")


def field(form: FormData, name: str) -> str | None:
    """A text field as sent (a file part or a missing field: None)."""
    value = form.get(name)
    return value if isinstance(value, str) else None


def text(form: FormData, name: str) -> str | None:
    """A non-empty text field of the form, stripped, else None."""
    value = field(form, name)
    if value is not None and value.strip():
        return value.strip()
    return None


def number(form: FormData, name: str, kind: type) -> Any:
    """A numeric field as ``kind`` (None when empty)."""
    value = text(form, name)
    if value is None:
        return None
    try:
        return TypeAdapter(kind).validate_strings(value)
    except ValidationError:
        raise InvalidError(f"{name}: not a number") from None


def _invalid(err: ValidationError) -> InvalidError:
    """The schema's first complaint, worded as the API words it (no input values)."""
    return InvalidError(describe_request_errors(err.errors(include_input=False))[0])


# --- the job form ------------------------------------------------------------------------


def job_form_options(labels: int = 0) -> dict[str, Any]:
    """What the job form offers, from the registry and the API's schema: the methods (the
    API's default preselected), each parameter with the methods that take it (the page shows
    those of the chosen method), the accountings, and the default shots of a task of
    ``labels`` labels (one per label up to a few labels, as the API's default)."""
    methods = [
        {"name": str(kind), "reads_public": bool(method.reads_public)}
        for kind, method in registry.METHODS.items()
    ]
    fields = [
        {"name": name, "methods": sorted(info.descriptions), "description": info.description()}
        for name, info in registry.param_fields().items()
    ]
    return {
        "methods": methods,
        "default_method": str(
            JobCreate.model_fields["method"].get_default(call_default_factory=True)
        ),
        "fields": fields,
        "accountings": [a.value for a in Accounting],
        "default_shots": default_shots(labels),
    }


def job_params(form: FormData, method: str) -> dict[str, Any]:
    """The chosen method's parameters that were filled in, typed. An input of another method
    left filled in (the page hides it) is not sent, as the page would not send it; for an
    unknown method none is, and the schema names the method as the problem."""
    params: dict[str, Any] = {}
    for name, info in registry.param_fields().items():
        value = text(form, f"param_{name}")
        if value is None or method not in info.descriptions:  # keyed by the methods taking it
            continue
        try:
            params[name] = TypeAdapter(info.annotation).validate_strings(value)
        except ValidationError as err:
            problem = err.errors(include_input=False)[0]["msg"]
            raise InvalidError(f"params.{name}: {problem}") from None
    return params


def job_request(form: FormData) -> JobRequest:
    """The job form as the services' request, validated by the API's schema. An empty
    accounting or delta is the budget's; empty shots, the default."""
    method = text(form, "method") or ""
    body = {
        "dataset_id": text(form, "dataset_id"),
        "method": method,
        "public_dataset_id": text(form, "public_dataset_id"),
        "validation_dataset_id": text(form, "validation_dataset_id"),
        "epsilon": number(form, "epsilon", float),
        "delta": number(form, "delta", float),
        "accounting": text(form, "accounting"),
        "shots": number(form, "shots", int),  # None: the task's default
        "params": job_params(form, method) or None,
    }
    try:
        asked = JobCreate.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as err:
        raise _invalid(err) from None
    return asked.to_request()


# --- the other forms -----------------------------------------------------------------------


def budget_update(form: FormData) -> BudgetUpdate:
    """The budget form (accounting: tight unless chosen, as the page preselects). The warn
    threshold is typed in percent (``warn_percent``; empty: unchanged) and sent as the API's
    fraction; a δ left as the page showed it (or empty) is unchanged."""
    percent = number(form, "warn_percent", float)
    try:
        fraction = warn_fraction(percent) if percent is not None else None
    except ValueError as err:
        raise InvalidError(f"warn_percent: {err}") from None
    # The page shows the budget's δ to 3 digits (``delta_shown``): sent back as shown, it is
    # unchanged, and the budget keeps its exact δ rather than the rounded one.
    unchanged = text(form, "delta") is not None and text(form, "delta") == text(form, "delta_shown")
    try:
        return BudgetUpdate.model_validate(
            {
                "epsilon": number(form, "epsilon", float),
                "delta": None if unchanged else number(form, "delta", float),
                "accounting": text(form, "accounting") or Accounting.TIGHT.value,
                "warn_threshold": fraction,
            }
        )
    except ValidationError as err:
        if any(e["loc"] == ("warn_threshold",) for e in err.errors()):
            raise InvalidError("warn_percent: a percentage in (0, 100]") from None
        raise _invalid(err) from None


def dataset_upload(form: FormData) -> tuple[DatasetUploadForm, UploadFile]:
    """The upload form: its file, and its fields as the API's multipart fields (a custom
    task is the JSON typed into ``task_spec``; the checkboxes ``public``, ``labelled`` and
    ``counts_public`` are on or absent)."""
    upload = form.get("file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        raise InvalidError(
            "file: choose a file to upload (CSV, TSV, JSONL, or a built-in task's own format)"
        )
    fields: dict[str, Any] = {
        name: value for name in _UPLOAD_TEXT_FIELDS if (value := text(form, name)) is not None
    }
    if text(form, "task") == "custom":
        fields["task"] = text(form, "task_spec")
    fields["public"] = form.get("public") == "on"
    fields["labelled"] = form.get("labelled") == "on"
    fields["counts_public"] = form.get("counts_public") == "on"
    try:
        return DatasetUploadForm.model_validate(fields), upload
    except ValidationError as err:
        raise _invalid(err) from None


def counts_public(form: FormData) -> bool:
    """The dataset page's counts form: ``public`` is "true" (declare) or "false" (withdraw)."""
    value = text(form, "public")
    if value not in ("true", "false"):
        raise InvalidError("public: true (declare the counts public) or false (withdraw it)")
    return value == "true"


def completion_query(form: FormData) -> str:
    """The prompt page's query (private to its sender: used once, never echoed or logged)."""
    query = text(form, "query")
    if query is None or len(query) > MAX_QUERY_CHARS:
        raise InvalidError(f"query: enter a query of 1 to {MAX_QUERY_CHARS} characters")
    return query


def advice_request(form: FormData) -> AdviceCreate:
    """An advice run from the dashboard's form: the dataset, the methods ticked, epsilons and
    shots as comma-separated lists, and seeds."""
    methods = [m for m in form.getlist("methods") if isinstance(m, str) and m]

    def numbers(name: str, kind: type) -> list[Any]:
        raw = text(form, name) or ""
        try:
            return [kind(x) for x in raw.replace(" ", "").split(",") if x]
        except ValueError:
            raise InvalidError(f"{name}: comma-separated numbers, got {raw!r}") from None

    values: dict[str, Any] = {"dataset_id": text(form, "dataset_id") or ""}
    if methods:
        values["methods"] = methods
    if epsilons := numbers("epsilons", float):
        values["epsilons"] = epsilons
    if shots := numbers("shots", int):
        values["shots"] = shots
    if (seeds := number(form, "seeds", int)) is not None:
        values["seeds"] = seeds
    try:
        return AdviceCreate.model_validate(values)
    except ValidationError as err:
        raise _invalid(err) from None
