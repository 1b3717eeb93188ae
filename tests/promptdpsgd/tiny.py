"""A tiny random causal LM behind a real TransformersBackend object, with a word-level
tokenizer: fast enough for exact per-example gradient checks (no download, no Gemma)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from app.llm.transformers_backend import TransformersBackend

VOCAB = 64
BOS, EOS, PAD = 1, 2, 0


class WordTokenizer:
    """Each whitespace-separated word gets the next free id (3 and up), wrapping around."""

    bos_token_id = BOS
    eos_token_id = EOS
    pad_token_id = PAD

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        del add_special_tokens
        out = []
        for word in text.replace("\n", " \n ").split(" "):
            if word:
                out.append(self.ids.setdefault(word, 3 + len(self.ids) % (VOCAB - 3)))
        return SimpleNamespace(input_ids=out)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        words = {v: k for k, v in self.ids.items()}
        return " ".join(words.get(i, "?") for i in ids)


def tiny_backend(seed: int = 0, batch_size: int = 32) -> TransformersBackend:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    backend = object.__new__(TransformersBackend)
    backend._name = "tiny-llama"
    backend.device = torch.device("cpu")
    backend.batch_size = batch_size
    backend.prefix_cache = False
    backend.sort_by_length = True
    backend.dtype = torch.float32
    backend.model = LlamaForCausalLM(config).eval()
    backend.tokenizer = WordTokenizer()
    backend._cache_arg = "past_key_values"
    backend.tokens_processed = backend.tokens_computed = 0
    backend.kv_cache_mb = 0.0  # no per-prompt KV store in a job's kv_scope
    return backend
