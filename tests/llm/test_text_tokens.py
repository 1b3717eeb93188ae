"""Only text is offered to a demonstration (issue 43): a served ticket prompt held Gemma's
``<start_of_image>`` (token 255999, not marked special in the converted tokenizer) and a
private-use character (U+F071). The local backend's ``top_k`` leaves out every special,
added, control-template and non-text token, keeping end-of-sequence and newlines; the
generator takes the same out of any backend's text (a vLLM server's tokenizer is its own)."""

from __future__ import annotations

import unicodedata
from typing import Any

import numpy as np
import torch

from app.llm.fake import FakeBackend
from app.synthesis.generator import _demonstrations, _Shot, only_text
from app.synthesis.tasks import BUILTIN_TASKS

START_OF_IMAGE = 255999


def test_gemmas_control_and_private_use_tokens_are_never_offered(gemma: Any) -> None:
    excluded = set(gemma.non_text_ids.tolist())
    tok = gemma.tokenizer
    assert tok.convert_ids_to_tokens(START_OF_IMAGE) == "<start_of_image>"
    assert START_OF_IMAGE in excluded
    pieces = tok.convert_ids_to_tokens(list(range(len(tok))))
    private_use = {
        i for i, p in enumerate(pieces) if p and any(unicodedata.category(c) == "Co" for c in p)
    }
    assert private_use and private_use <= excluded
    assert {i for i, p in enumerate(pieces) if p and p.startswith("<unused")} <= excluded
    # what ends a demonstration or an answer stays, and ordinary words are never left out
    assert gemma.eos_id not in excluded and not (set(gemma.newline_ids) & excluded)
    assert not set(gemma.tokenize(" What city is the capital of Australia ?")) & excluded
    assert len(excluded) < 0.05 * len(tok)


def test_top_k_skips_an_excluded_token_even_when_it_is_the_most_probable(gemma: Any) -> None:
    prompt = gemma.tokenize("Question: What is")
    real = gemma.last_logits([prompt])
    boosted = real.clone()
    boosted[0, START_OF_IMAGE] = real.max() + 50.0  # the model's favourite, before the rule
    original = gemma.last_logits
    try:
        gemma.last_logits = lambda prompts: boosted.expand(len(prompts), -1).clone()
        top = gemma.top_k([prompt], 20)
    finally:
        gemma.last_logits = original
    assert START_OF_IMAGE not in top[0]
    assert list(top[0]) == [
        int(i) for i in torch.topk(real[0], 20).indices
    ]  # the rest is the plain ranking


def test_text_is_taken_out_of_whatever_a_backend_returns() -> None:
    assert only_text("How far\uf071 is <start_of_image>Mars ?") == "How far is Mars ?"
    assert only_text("a<|im_end|> b<unused7>\x07c\td") == "a b\x07c\td".replace("\x07", "")
    backend = FakeBackend()
    shots = [_Shot("w5", "w5"), _Shot("w7", "w7")]
    texts = {"w5": "<start_of_image>\uf071", "w7": "<end_of_turn>what is it"}
    original = backend.detokenize
    backend.detokenize = lambda ids: texts["w5" if ids == [1] else "w7"]  # type: ignore[method-assign]
    shots[0].generated, shots[1].generated = [1], [2]
    for shot in shots:
        shot.done = True
    try:
        demos, stats = _demonstrations(shots, backend, BUILTIN_TASKS["trec"], min_words=2)
    finally:
        backend.detokenize = original  # type: ignore[method-assign]
    assert [(d.label, d.text) for d in demos] == [("w7", "what is it")]
    assert stats == {"empty_demonstrations": 1}  # nothing but control text: not served
    assert np.all([only_text(d.text) == d.text for d in demos])
