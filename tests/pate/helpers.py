"""Shared data for the PromptPATE tests: private records whose text is easy to spot."""

from __future__ import annotations

from app.synthesis.data import Record
from app.synthesis.tasks import BUILTIN_TASKS

SST2 = BUILTIN_TASKS["sst2"]
SECRET = "secretword"


def private_records(n: int, *, prefix: str = SECRET) -> list[Record]:
    """``n`` distinct records, alternating labels; every text contains ``prefix``."""
    labels = ("negative", "positive")
    return [Record(f"{prefix}{i} plot line {i}", labels[i % 2]) for i in range(n)]


def public_inputs(good: int, bad: int, mixed: int) -> list[str]:
    """High-consensus ("good"/"bad") and low-consensus ("mixed") public inputs."""
    return (
        [f"a good film number {i}" for i in range(good)]
        + [f"a bad film number {i}" for i in range(bad)]
        + [f"mixed feelings number {i}" for i in range(mixed)]
    )
