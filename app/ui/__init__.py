"""The web dashboard's support code: signed sessions with CSRF tokens (:mod:`.session`),
server-rendered SVG charts (:mod:`.charts`), and the templates and static files it serves.
Its routes are in :mod:`app.api.routes.ui`; what it shows comes from :mod:`app.services`."""
