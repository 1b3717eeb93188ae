"""The method names, kept free of heavy imports so the database models and the thin HTTP
client can use them without loading the algorithms."""

from __future__ import annotations

from enum import StrEnum


class MethodKind(StrEnum):
    """What a job runs: the token loop with one of its aggregators, PromptPATE (which
    also reads a public dataset), or PromptDPSGD (a soft prompt; local model only).
    The one list of methods for the API, the CLI and the workers;
    :mod:`app.methods.registry` maps each to its implementation."""

    TANG = "tang"
    ADADPSYN = "adadpsyn"
    PROMPTPATE = "promptpate"
    PROMPTDPSGD = "promptdpsgd"
