"""The deterministic fake backend; it lives in :mod:`app.llm.fake` (the workers' test hook
builds it, and no production module imports ``tests``)."""

from app.llm.fake import EOS, NEWLINE, FakeBackend

__all__ = ["EOS", "NEWLINE", "FakeBackend"]
