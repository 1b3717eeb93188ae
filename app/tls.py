"""One verifying TLS context per process, for every HTTP client the service makes.

Why. httpx builds a new :class:`ssl.SSLContext` for each client it creates, and building one
loads the whole CA bundle: about 25 ms of CPU each time, whether or not the client ever
talks TLS. The command-line client makes one client per command, the vLLM backend one per
backend, and a process that runs many of them (a test run, a script looping over ``dpsyn``
commands in one interpreter, an API replica opening backends) paid for the bundle each time.
A context is safe to share between clients and threads, so one is made on first use and
kept; it verifies certificates exactly as httpx's default does (the same CA bundle,
``SSL_CERT_FILE``/``SSL_CERT_DIR`` read once, when it is made).
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_context() -> ssl.SSLContext:
    """httpx's default verifying context, made once per process (pass it as ``verify=``)."""
    return httpx.create_ssl_context()
