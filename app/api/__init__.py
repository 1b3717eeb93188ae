"""The HTTP API: routers (``routes/``), dependencies (``deps``), schemas and error handlers.

Routes only map HTTP to the service layer (``app.services``) and rows to public schemas.
"""
