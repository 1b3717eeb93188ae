"""Local backend: a transformers causal LM on CPU or GPU.

Batches are left-padded so that every prompt's next token is predicted at the last position,
and only that position's logits are computed (``logits_to_keep=1``). Prompts are processed in
chunks of ``batch_size``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cached_property

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from app.llm.base import BackendError
from app.llm.models import DEFAULT_MODEL, ModelSource, resolve

log = logging.getLogger(__name__)


def _load(source: ModelSource, dtype: torch.dtype):
    """Load a model and tokenizer, converting a GGUF once and caching the result."""
    if source.folder is not None:
        return (
            AutoModelForCausalLM.from_pretrained(source.folder, dtype=dtype),
            AutoTokenizer.from_pretrained(source.folder),
        )
    converted = source.converted
    if not (converted / "config.json").exists():
        log.info("converting %s once into %s (this takes up to a minute)", source.gguf, converted)
        gguf = source.gguf
        assert gguf is not None
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        # A model loaded from GGUF refuses save_pretrained; copy its de-quantised weights
        # into a plain model of the same configuration.
        config = quantized.config
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantized.state_dict())
        partial = converted.with_name(converted.name + ".partial")
        plain.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(converted)
    return (
        AutoModelForCausalLM.from_pretrained(converted, dtype=dtype),
        AutoTokenizer.from_pretrained(converted),
    )


class TransformersBackend:
    """Next-token distributions from a local transformers model."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        device: str | None = None,
        batch_size: int = 32,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        source = resolve(model)
        self._name = source.key
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.batch_size = batch_size
        self.model, self.tokenizer = _load(source, dtype)
        self.model.to(self.device).eval()
        self.tokens_processed = 0  # prompt tokens seen by the model, for throughput stats

    @property
    def name(self) -> str:
        return self._name

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @cached_property
    def newline_ids(self) -> frozenset[int]:
        tok: PreTrainedTokenizerBase = self.tokenizer
        pieces = tok.convert_ids_to_tokens(list(range(len(tok))))
        marked = [i for i, p in enumerate(pieces) if p and ("\n" in p or "Ċ" in p or p == "<0x0A>")]
        return frozenset(i for i in marked if "\n" in tok.decode([i]))

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _with_bos(self, prompt: Sequence[int]) -> list[int]:
        bos = self.tokenizer.bos_token_id
        if bos is None or (prompt and prompt[0] == bos):
            return list(prompt)
        return [bos, *prompt]

    @torch.inference_mode()
    def last_logits(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Logits of the next token after each prompt (B x vocabulary), in chunks."""
        if not prompts:
            raise BackendError(f"{self.name}: empty batch")
        pad = self.tokenizer.pad_token_id
        pad = self.eos_id if pad is None else pad
        out = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = [self._with_bos(p) for p in prompts[start : start + self.batch_size]]
            width = max(len(p) for p in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, prompt in enumerate(chunk):
                ids[row, width - len(prompt) :] = torch.tensor(prompt)
                mask[row, width - len(prompt) :] = 1
            positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
            logits = self.model(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                position_ids=positions.to(self.device),
                logits_to_keep=1,
            ).logits[:, -1, :]
            self.tokens_processed += int(mask.sum())
            out.append(logits.float().cpu())
        return torch.cat(out)

    def next_token_probs(
        self, prompts: Sequence[Sequence[int]], token_sets: np.ndarray
    ) -> np.ndarray:
        token_sets = np.asarray(token_sets)
        if token_sets.ndim != 2 or token_sets.shape[0] != len(prompts):
            raise BackendError(
                f"{self.name}: token_sets must be B x K with B = {len(prompts)}, "
                f"got shape {token_sets.shape}"
            )
        logits = self.last_logits(prompts)
        chosen = torch.gather(logits, 1, torch.as_tensor(token_sets, dtype=torch.long))
        return torch.softmax(chosen.double(), dim=1).numpy()

    def top_k(self, prompts: Sequence[Sequence[int]], k: int) -> np.ndarray:
        return self.last_logits(prompts).topk(k, dim=1).indices.numpy()
