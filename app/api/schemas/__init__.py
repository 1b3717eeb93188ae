"""Request and response bodies. Responses are built field by field from rows
(``from_row``), so an ORM row is never returned and private records never appear.

The bodies live in one module per resource (``common``, ``datasets``, ``budgets``, ``jobs``,
``prompts``, ``keys``, ``advice``); this package re-exports them, so a route imports what it
needs from ``app.api.schemas``.
"""

from app.api.schemas.advice import (  # noqa: F401
    AdviceCreate,
    AdvicePublic,
)
from app.api.schemas.budgets import (  # noqa: F401
    BudgetPublic,
    BudgetSummary,
    BudgetUpdate,
    CountReleasePublic,
    LabelGroupPublic,
    LedgerEventPublic,
)
from app.api.schemas.common import (  # noqa: F401
    COLUMN_NAME_MAX_CHARS,
    MAX_OFFSET,
    Column,
    Delta,
    ErrorBody,
    ErrorDetail,
    Health,
    IdFilter,
    Limit,
    Name,
    Offset,
    ResourceId,
    Timestamp,
)
from app.api.schemas.datasets import (  # noqa: F401
    COUNTS_PUBLIC_DESCRIPTION,
    LABELLED_DESCRIPTION,
    PUBLIC_DESCRIPTION,
    UPLOAD_OPENAPI,
    CountsPublicUpdate,
    DatasetCreate,
    DatasetPublic,
    DatasetUploadForm,
    RecordReadPublic,
)
from app.api.schemas.jobs import (  # noqa: F401
    GroupQuote,
    JobBatch,
    JobCreate,
    JobParams,
    JobPublic,
    JobQuote,
    ProgressPublic,
)
from app.api.schemas.keys import (  # noqa: F401
    KeyCreate,
    KeyCreated,
    KeyPublic,
)
from app.api.schemas.prompts import (  # noqa: F401
    ChatMessagePublic,
    CompletionPublic,
    CompletionRequest,
    DemonstrationPublic,
    PromptFormat,
    PromptFormatQuery,
    PromptMessagesPublic,
    PromptPublic,
    PromptSummary,
    SoftPromptPublic,
    ValidationBaselines,
    ValidationPublic,
    validation_outcome,
    validation_verdict,
)
