"""dpsyn-client: fetch differentially private prompts from a dpsyn server by ID and use them.

Pure Python, Python 3.9 or newer, httpx its only dependency (no model, no web framework, no
database), under its own import name so that an app with its own ``app`` package can use it.
"""

from __future__ import annotations

from dpsyn_client.chat import ChatMessage, NoChatFormError, chat_messages
from dpsyn_client.client import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_TIMEOUT_S,
    ApiError,
    DpsynClientError,
    Prompt,
    PromptClient,
    UnreachableError,
    without_credentials,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_TIMEOUT_S",
    "ApiError",
    "ChatMessage",
    "DpsynClientError",
    "NoChatFormError",
    "Prompt",
    "PromptClient",
    "UnreachableError",
    "chat_messages",
    "without_credentials",
]
