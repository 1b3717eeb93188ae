"""The one forward pass with a soft prompt, shared by training and inference.

Every prompt runs as ``inputs_embeds = [BOS embedding (if the model has a BOS token)] +
soft prompt + embeddings of the prompt's tokens``, left-padded so that the next token is
predicted at the last position (as :class:`~app.llm.transformers_backend.TransformersBackend`
does), and only the last position's logits are computed. The token embeddings come from the
model's own input embedding module, which for Gemma includes its sqrt(hidden) scaling: the
soft prompt lives in the same space as what that module outputs.

Because the trainer (:mod:`app.promptdpsgd.train`) and the serving wrapper
(:mod:`app.promptdpsgd.backend`) call the same function, what a job was trained on is what
is answered; ``tests/promptdpsgd/test_backend.py`` checks that they agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def strip_bos(tokens: Sequence[int], bos_id: int | None) -> list[int]:
    """The prompt without a leading BOS (it is placed before the soft prompt instead)."""
    seq = list(tokens)
    if bos_id is not None and seq and seq[0] == bos_id:
        return seq[1:]
    return seq


def soft_prompt_logits(
    model: nn.Module,
    soft: torch.Tensor,
    prompts: Sequence[Sequence[int]],
    *,
    bos_id: int | None,
    pad_id: int,
) -> torch.Tensor:
    """Next-token logits (B x vocabulary, float32) after ``soft[b]`` and ``prompts[b]``.

    ``soft`` is ``B x L x hidden`` (one copy per row, so a per-example gradient can be read
    from ``soft.grad[b]``: rows never interact, each has its own attention mask). Gradients
    flow to ``soft`` when it requires them; the model's weights are never updated here.
    """
    rows = len(prompts)
    if soft.ndim != 3 or soft.shape[0] != rows:
        raise ValueError(f"soft prompt batch must be {rows} x L x hidden, got {tuple(soft.shape)}")
    embed: nn.Module = model.get_input_embeddings()  # type: ignore[operator]
    weight = embed.weight
    assert isinstance(weight, torch.Tensor)
    device, dtype = weight.device, weight.dtype
    seqs = [strip_bos(p, bos_id) for p in prompts]
    head = [bos_id] if bos_id is not None else []
    token_rows = [head + s for s in seqs]
    length = soft.shape[1]
    # Layout of row b: padding, then [BOS], soft prompt, the prompt's tokens.
    lengths = [len(t) + length for t in token_rows]
    width = max(lengths)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    is_soft = torch.zeros((rows, width), dtype=torch.bool)
    for b, toks in enumerate(token_rows):
        start = width - lengths[b]
        mask[b, start:] = 1
        n_head = len(head)
        ids[b, start : start + n_head] = torch.tensor(head, dtype=torch.long)
        is_soft[b, start + n_head : start + n_head + length] = True
        ids[b, start + n_head + length :] = torch.tensor(toks[n_head:], dtype=torch.long)
    embeds = embed(ids.to(device))
    soft_rows = soft.to(device=device, dtype=dtype).reshape(rows * length, -1)
    embeds = embeds.masked_scatter(is_soft.to(device).unsqueeze(-1), soft_rows)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(
        inputs_embeds=embeds,
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        use_cache=False,
        logits_to_keep=1,
    ).logits[:, -1, :]
    return logits.float()
