"""The HTTP clients the service makes share one verifying TLS context (app/tls.py)."""

from __future__ import annotations

import ssl

from app.cli.http_client import Api
from app.llm.vllm_generate import VLLMGenerator
from app.llm.vllm_http import VLLMHttpBackend
from app.tls import client_context


def _context(client) -> ssl.SSLContext:
    return client._transport._pool._ssl_context  # httpx's transport, httpcore's pool


def test_every_client_shares_one_context_that_verifies_as_httpx_does():
    with Api("http://127.0.0.1:1", "a-key") as first, Api("https://example.org", "b") as second:
        shared = _context(first.http)
        assert _context(second.http) is shared is client_context()
    backend = VLLMHttpBackend(url="http://127.0.0.1:1", model="model")
    generator = VLLMGenerator("http://127.0.0.1:1", "model")
    try:
        assert _context(backend._client) is shared and _context(generator._client) is shared
    finally:
        backend.close()
        generator.close()
    # Verification as httpx's default client has it: certificates and host names checked.
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
    assert shared.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded
