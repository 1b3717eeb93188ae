"""A model's input-embedding table, read from its safetensors files without loading the model.

What a soft prompt served by vLLM needs (``app.promptdpsgd.vllm``): vLLM takes a prompt as
embeddings (``prompt_embeds``, ``--enable-prompt-embeds``), so the service builds the sequence
``[BOS] + soft prompt + query`` itself, and the query's rows come from this table. The table is
memory-mapped (Gemma-3-270M's is 262,144 x 640 float32, 671 MB): only the rows of the tokens
asked for are read from disk.

The rows are the model's *input* embeddings as its forward pass sees them, which for the Gemma
family means multiplied by sqrt(hidden size) (transformers' ``Gemma3TextScaledWordEmbedding``,
vLLM's ``normalizer``): the space the soft prompt was trained in (``app.promptdpsgd.forward``
puts it beside the output of ``get_input_embeddings()``).
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: Model types whose input embeddings are scaled by sqrt(hidden size) inside the model.
SCALED_TYPES = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
_NAMES = (
    "model.embed_tokens.weight",
    "embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
)
_DTYPES = {"F32": np.float32, "F16": np.float16}


class EmbeddingTableError(ValueError):
    """The folder holds no input-embedding table this module can read."""


class EmbeddingTable:
    """Rows of a model's input embeddings by token id (float32), memory-mapped."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        config = _config(folder)
        self.model_type = str(config.get("model_type", ""))
        self.hidden = int(config["hidden_size"])
        self.scale = math.sqrt(self.hidden) if self.model_type in SCALED_TYPES else 1.0
        self._rows = _mapped_table(folder)
        if self._rows.shape[1] != self.hidden:
            raise EmbeddingTableError(
                f"{folder}: the embedding table is {self._rows.shape[1]} wide, the config says "
                f"{self.hidden}"
            )

    @property
    def vocabulary(self) -> int:
        return int(self._rows.shape[0])

    def embed(self, ids: Sequence[int]) -> np.ndarray:
        """The input embeddings of ``ids`` (len(ids) x hidden, float32), scaled as the model
        scales them."""
        rows = np.asarray(self._rows[np.asarray(list(ids), dtype=np.int64)], dtype=np.float32)
        return rows * np.float32(self.scale) if self.scale != 1.0 else rows


def _config(folder: Path) -> dict:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise EmbeddingTableError(
            f"{folder}: no readable config.json ({type(err).__name__})"
        ) from None
    config = config.get("text_config", config) if "hidden_size" not in config else config
    if "hidden_size" not in config:
        raise EmbeddingTableError(f"{folder}/config.json has no hidden_size")
    return config


def _mapped_table(folder: Path) -> np.ndarray:
    """The embedding tensor of the first safetensors file that holds one, memory-mapped
    (a safetensors file is an 8-byte header length, a JSON header, then raw tensors)."""
    for path in sorted(folder.glob("*.safetensors")):
        with path.open("rb") as file:
            (length,) = struct.unpack("<Q", file.read(8))
            header = json.loads(file.read(length))
        for name in _NAMES:
            if name in header:
                entry = header[name]
                dtype = _DTYPES.get(entry["dtype"])
                if dtype is None:
                    raise EmbeddingTableError(
                        f"{path}: {name} is {entry['dtype']}; float32 or float16 tables only"
                    )
                start, _ = entry["data_offsets"]
                return np.memmap(
                    path,
                    dtype=dtype,
                    mode="r",
                    offset=8 + length + start,
                    shape=tuple(entry["shape"]),
                )
    raise EmbeddingTableError(f"{folder}: no safetensors file holds an input-embedding table")


@functools.lru_cache(maxsize=4)
def table_for(folder: str) -> EmbeddingTable:
    """One table per folder per process (mapping is cheap; the pages are the OS's)."""
    return EmbeddingTable(folder)
