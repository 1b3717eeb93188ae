"""Markers of the worker tests."""

from __future__ import annotations


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "distributed: runs a real Celery worker process against PostgreSQL and Redis",
    )
