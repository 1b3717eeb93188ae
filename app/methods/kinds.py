"""The names of the built-in methods, kept free of heavy imports.

A method's name is a plain string, the key it is registered under
(:mod:`app.methods.registry`); nothing requires a name to be one of these. They spell the
four that ship with the service, for the code that builds them and for tests.
"""

from __future__ import annotations

from enum import StrEnum


class MethodKind(StrEnum):
    """The built-in methods: the token loop with one of its aggregators, PromptPATE (which
    also reads a public dataset), and PromptDPSGD (a soft prompt; local model only)."""

    TANG = "tang"
    ADADPSYN = "adadpsyn"
    PROMPTPATE = "promptpate"
    PROMPTDPSGD = "promptdpsgd"
