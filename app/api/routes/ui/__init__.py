"""The web dashboard (``/ui``): server-rendered pages over the same services as the API.

Three modules, one concern each:

* :mod:`.session`: sessions and CSRF as FastAPI dependencies (sign-in exchanges an API key
  for a signed cookie and a row on the server; every request re-checks both and the key).
* :mod:`.forms`: what each form offers (the job form from the method registry) and its
  fields turned into the API's requests, validated by the API's schemas.
* :mod:`.pages`: the handlers, scoped to the session key's tenant, rendering the API's
  public schemas: metadata and DP outputs, never a private record.

A ``prompts:read`` session sees the prompt pages only. See docs/dashboard.md.
"""

from app.api.routes.ui.pages import router

__all__ = ["router"]
