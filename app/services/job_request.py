"""What a client asks of a synthesis job, as one validated value.

The API route, the dashboard's job and quote forms and any Python caller build a
:class:`JobRequest`; :func:`~app.services.jobs.plan_submission`,
:func:`~app.services.jobs.quote_job` and :func:`~app.services.jobs.submit_job` take it. One
object instead of the same keywords spread over five call sites means a field added to a
job (or one a caller forgets, as the dashboard once did with ``accounting``) is a type error,
not a silently ignored setting.

The model checks types and the bounds the API schema (``app.api.schemas.JobCreate``) also
states; the checks that need the dataset or the method (epsilon's rule with its message, a
public dataset only for the methods that read one, the budget's accounting, ``params.seed``)
stay in :func:`~app.services.jobs.plan_submission`, which answers them with the 422s the
API documents. Who asks (the tenant) and where it runs (the backend) are not part of the
request: they come from the caller's key and the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.methods.registry import DEFAULT_METHOD, find_method, unknown_method
from app.privacy.accounting import Accounting

# The bounds of app.api.schemas (IDs are 32 hex digits; 128 is the columns' limit).
_Id = Annotated[str, Field(min_length=1, max_length=128)]
MAX_SHOTS = 64


def _registered(value: str) -> str:
    """A method name is accepted only if this deployment registers it (app.methods)."""
    if find_method(value) is None:
        raise ValueError(unknown_method())
    return value


# The one check on a job's method name, shared by the API's JobCreate and JobRequest.
RegisteredMethod = Annotated[str, AfterValidator(_registered)]


class JobRequest(BaseModel):
    """A job as asked: the private dataset it reads and is charged to, the method (a
    registered name), its target epsilon (noise is calibrated to it), delta (None: the
    budget's), accounting (None: the budget's; another one is refused), shots (what they
    count is the method's ``shots_param``; ignored by a method without one), the method's
    own ``params`` (None or missing keys: the method's defaults), for a method that
    reads one, the public dataset, and optionally a public labelled dataset the stored
    prompt is scored on afterwards (``validation_dataset_id``; post-processing, never
    charged).

    Frozen: a request is a value, checked once where it is built and passed on unchanged.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset_id: _Id
    method: RegisteredMethod = DEFAULT_METHOD
    epsilon: float
    delta: float | None = Field(None, gt=0, lt=1)
    accounting: Accounting | None = None
    shots: int | None = Field(None, ge=1, le=MAX_SHOTS)  # None: the task's default
    params: Mapping[str, Any] | None = None
    public_dataset_id: _Id | None = None
    validation_dataset_id: _Id | None = None
