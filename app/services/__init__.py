"""The service layer: what the HTTP routes (and the workers) do, without HTTP.

Functions here take a SQLAlchemy session and plain values, return ORM rows, and raise
:class:`~app.services.errors.ServiceError` subclasses whose messages name the problem and
never contain private record text. Routes map rows to the public schemas of
``app.api.schemas``; no row is ever returned to a client as is.
"""
