"""Soft prompts served by vLLM: every prompt sent as embeddings, ``[BOS] + soft prompt + text``.

The local :class:`~app.promptdpsgd.backend.SoftPromptedBackend` runs that sequence through the
model's forward pass; vLLM takes it as ``prompt_embeds`` (started with
``--enable-prompt-embeds``, as ``scripts/vllm_serve.sh`` starts it), so the service builds it:
the BOS and text rows from the served model's input-embedding table
(:class:`~app.llm.embedding_table.EmbeddingTable`, memory-mapped from the model's folder), the
soft prompt's rows between them, the same order the trainer used. A soft prompt trained for
another model, or of another width than the table, is refused before any request.

Where the table comes from: ``DPSYN_EMBEDDINGS_DIR`` (a folder with the served model's
``config.json`` and safetensors files), else the packaged model's converted folder when the
served name is a packaged model's (``gemma-3-270m``, ``smollm2-135m``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from app.llm.embedding_table import EmbeddingTable, EmbeddingTableError, table_for
from app.llm.models import DEFAULT_MODEL, LIGHT_MODEL
from app.llm.vllm_http import VLLMHttpBackend
from app.promptdpsgd.artifact import SoftPrompt
from app.promptdpsgd.backend import SoftPromptMismatchError


class NoEmbeddingTableError(ValueError):
    """The served model's input-embedding table cannot be found or read."""


def embedding_folder(served: str, configured: str | None) -> Path:
    """Where the served model's embedding table is (module docstring)."""
    if configured:
        return Path(configured)
    if served in (DEFAULT_MODEL, LIGHT_MODEL):
        from app.llm.transformers_backend import model_folder  # converts once if needed

        return model_folder(served)
    raise NoEmbeddingTableError(
        f"the served model {served!r} is not a packaged model: set DPSYN_EMBEDDINGS_DIR to "
        "a folder with its config.json and safetensors files (its input embeddings are "
        "what a soft prompt is put beside)"
    )


def soft_prompt_embedder(
    soft: SoftPrompt, table: EmbeddingTable, bos: Sequence[int]
) -> Callable[[Sequence[int]], np.ndarray]:
    """``ids -> [embeddings of the leading BOS ids] + soft + [embeddings of the rest]``."""
    rows = np.asarray(soft.embeddings, dtype=np.float32)
    lead = len(bos)

    def embed(ids: Sequence[int]) -> np.ndarray:
        ids = list(ids)
        head = ids[:lead] if ids[:lead] == list(bos) else []
        rest = ids[len(head) :]
        parts = [table.embed(head)] if head else []
        parts += [rows] + ([table.embed(rest)] if rest else [])
        return np.concatenate(parts, axis=0)

    return embed


def vllm_soft_prompted(
    inner: VLLMHttpBackend, soft: SoftPrompt, embeddings_dir: str | None
) -> VLLMHttpBackend:
    """``inner`` with ``soft`` in front of every prompt, or :class:`SoftPromptMismatchError`
    (another model or width) or :class:`NoEmbeddingTableError`."""
    if soft.model != inner.name:
        raise SoftPromptMismatchError(
            f"the soft prompt was trained for model {soft.model!r}, not for {inner.name!r}: "
            "a soft prompt only works with the model it was trained on"
        )
    folder = embedding_folder(inner.name, embeddings_dir)
    try:
        table = table_for(str(folder))
    except EmbeddingTableError as err:
        raise NoEmbeddingTableError(str(err)) from None
    if soft.hidden != table.hidden:
        raise SoftPromptMismatchError(
            f"the soft prompt's embeddings have {soft.hidden} dimensions; model "
            f"{inner.name!r} takes {table.hidden}"
        )
    return inner.with_prompt_embeds(soft_prompt_embedder(soft, table, inner.bos_ids))
