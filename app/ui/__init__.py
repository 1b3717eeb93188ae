"""The web dashboard's support code: signed sessions with CSRF tokens and their cookies
(:mod:`.session`), their rows on the server (:mod:`.store`), rendering (:mod:`.render`),
server-rendered SVG charts (:mod:`.charts`), and the templates and static files it serves.
Its routes are the package :mod:`app.api.routes.ui`; what it shows comes from
:mod:`app.services`. Nothing here imports :mod:`app.api` (the routes import this)."""
