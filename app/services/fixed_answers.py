"""Answers from a fixed set on the OpenAI-compatible routes: a classification prompt's labels
(the decision ``/complete`` makes) and the app's own choices (scored on the embedded engine).

Why scoring rather than writing: the set is known, so the model's probability of each answer
(:mod:`app.synthesis.scoring`, the one scorer) both picks the answer and gives the app the
distribution it asks for with ``logprobs``. An answer is whole and one piece of text (a
stream sends it in one chunk): ``max_tokens`` and ``stop`` never cut it to a non-answer.
Temperature 0 (the default) answers the most probable (the first of equal ones, as
``/complete``); a higher temperature, with ``top_p`` and ``seed``, draws from the
distribution as free text draws a token (:func:`app.llm.generation.draw`).

``logprobs`` describe the answer as one "token", the whole answer, whose alternatives
(``top_logprobs``) are the other answers of the set, most probable first: the label
distribution of a classification prompt, ``/complete``'s ``scores`` (calibrated when asked)
in log form. The app's text is read here only to score it; it is never logged or stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from app.llm.base import LLMBackend
from app.llm.generation import (
    ChatMessage,
    Finished,
    Generated,
    GenerationParams,
    Logprobs,
    TokenLogprob,
    draw,
    logprob,
)
from app.services.errors import InvalidError
from app.services.prompts import PromptSource, classify
from app.synthesis.prompts import answer_text, query_suffix
from app.synthesis.scoring import ScoringError, choice_sequences, sequence_probabilities
from app.synthesis.tasks import TaskSpec


def question(task: TaskSpec, text: str, param: str) -> str:
    """The app's question in ``text``, without the prompt's form around it (a leading
    ``{text_field}:`` as the chat form writes user turns, a trailing ``{label_field}:`` as
    the text prompt leaves the answer line open), on one line: ``/complete``'s query."""
    query = " ".join(text.split())
    head, tail = f"{task.text_field}:", f"{task.label_field}:"
    if query.casefold().startswith(head.casefold()):
        query = query[len(head) :].strip()
    if query.casefold().endswith(tail.casefold()):
        query = query[: -len(tail)].strip()
    if not query:
        raise InvalidError(
            f"{param}: no question to answer with a label", code="empty_question", param=param
        )
    return query


def chat_question(task: TaskSpec, messages: Sequence[ChatMessage]) -> str:
    """The question of a conversation: its last message, which must be the user's. Earlier
    messages do not change a label (``/complete`` reads one question)."""
    if messages[-1]["role"] != "user":
        raise InvalidError(
            "messages: a label answer labels the last message, which must be the user's "
            '(response_format {"type": "text"} answers any conversation in free text)',
            code="no_question",
            param="messages",
        )
    return question(task, messages[-1]["content"], "messages")


def label_answer(
    source: PromptSource,
    backend: LLMBackend,
    query: str,
    params: GenerationParams,
    *,
    calibrated: bool,
    spaced: bool,
) -> Generated:
    """The prompt's label for ``query`` by ``/complete``'s decision, written as the prompt
    writes it: its verbaliser word, after a space when ``spaced`` (a text completion
    continues the prompt's open answer line)."""
    task = source.task
    scores = classify(source, backend, query, calibrated=calibrated)
    texts = [answer_text(task, label) if spaced else task.verbalise(label) for label in scores]
    context = backend.tokenize(source.prompt + query_suffix(task, query))

    def tokens(index: int) -> int:
        return len(backend.tokenize(answer_text(task, task.labels[index])))

    yield from _pick(texts, np.array(list(scores.values())), params, len(context), tokens)


def choice_answer(
    backend: LLMBackend,
    context: str,
    choices: Sequence[str],
    params: GenerationParams,
    *,
    prefix: str,
    param: str,
) -> Generated:
    """One of ``choices`` after ``context``: the model's distribution over their tokens
    (after ``prefix``, the space a transcript writes before an answer), by the scorer's trie
    walk, as constrained decoding would read it."""
    try:
        seqs = choice_sequences(backend, {c: prefix + c for c in choices}, what="choices")
    except ScoringError as err:
        raise InvalidError(f"{param}: {err}", code="invalid_choices", param=param) from None
    tokens = backend.tokenize(context)
    probs = sequence_probabilities(backend, [tokens], [seqs[c] for c in choices])[0]

    def answer_tokens(index: int) -> int:
        return len(backend.tokenize(prefix + choices[index]))

    yield from _pick(list(choices), probs, params, len(tokens), answer_tokens)


def _pick(
    texts: Sequence[str],
    probs: np.ndarray,
    params: GenerationParams,
    prompt_tokens: int,
    answer_tokens: Callable[[int], int],
) -> Generated:
    """One of ``texts`` by ``probs`` (:func:`draw`), after its log-probabilities when asked."""
    chosen = draw(probs, params, np.random.default_rng(params.seed))
    if params.logprobs is not None:
        order = np.argsort(-probs, kind="stable")[: params.logprobs]
        top = tuple((texts[i], logprob(probs[i])) for i in order)
        yield Logprobs((TokenLogprob(texts[chosen], logprob(probs[chosen]), top),))
    yield texts[chosen]
    yield Finished("stop", prompt_tokens, answer_tokens(chosen))
