"""The output of a PromptDPSGD job: a soft prompt, stored and served as bytes.

A soft prompt is a ``length x hidden`` matrix of input embeddings for one model. It is a DP
release (the last iterate of DP-SGD), so, like a prompt set's demonstrations, any key of the
tenant may read and download it. It is stored in the safetensors format (a plain, safe tensor
file that ``safetensors.torch.load`` reads without running code), with the model's name in
the file's metadata, and identified by the SHA-256 of those bytes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
from safetensors.numpy import load as st_load

TENSOR = "soft_prompt"  # the tensor's name inside the file
FORMAT = "dpsyn-soft-prompt/1"  # the metadata's format tag


class SoftPromptError(ValueError):
    """Bytes that are not a soft prompt of this format (the message names the problem)."""


@dataclass(frozen=True)
class SoftPrompt:
    """Input embeddings (``length x hidden``, float32) trained for ``model``."""

    model: str
    embeddings: np.ndarray

    def __post_init__(self) -> None:
        emb = np.asarray(self.embeddings)
        if emb.ndim != 2 or emb.shape[0] < 1 or emb.shape[1] < 1:
            raise SoftPromptError(f"a soft prompt is a length x hidden matrix, got {emb.shape}")
        if not np.all(np.isfinite(emb)):
            raise SoftPromptError("a soft prompt's embeddings must be finite")
        object.__setattr__(self, "embeddings", np.ascontiguousarray(emb, dtype=np.float32))

    @property
    def length(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def hidden(self) -> int:
        return int(self.embeddings.shape[1])

    def to_bytes(self) -> bytes:
        """The safetensors file, byte-for-byte deterministic for equal embeddings and model
        (so its hash identifies it): the header is written here with sorted keys, since the
        library's writer orders metadata arbitrarily."""
        data = self.embeddings.astype("<f4").tobytes()
        header = {
            "__metadata__": {"format": FORMAT, "model": self.model},
            TENSOR: {
                "dtype": "F32",
                "shape": list(self.embeddings.shape),
                "data_offsets": [0, len(data)],
            },
        }
        text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes
        return len(text).to_bytes(8, "little") + text + data

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @classmethod
    def from_bytes(cls, data: bytes) -> SoftPrompt:
        """Inverse of :meth:`to_bytes`; :class:`SoftPromptError` for anything else."""
        try:
            tensors = st_load(data)
            metadata = _metadata(data)
        except Exception as err:  # any parse failure: not a soft prompt
            raise SoftPromptError(f"not a soft prompt file: {type(err).__name__}") from None
        if metadata.get("format") != FORMAT or TENSOR not in tensors or "model" not in metadata:
            raise SoftPromptError(f"not a {FORMAT} file")
        return cls(model=metadata["model"], embeddings=tensors[TENSOR])


def _metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (an 8-byte length, then a JSON header)."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    return dict(header.get("__metadata__") or {})
