"""The one scorer: label trie, prefix rule, extraction length, and its users agreeing on it."""

from __future__ import annotations

import pytest

from app.eval.audit import score_candidates
from app.llm.provider import StaticProvider
from app.services.errors import InvalidError
from app.services.prompts import PromptSource, complete
from app.synthesis.data import Record
from app.synthesis.scoring import (
    MAX_EXTRACTION_TOKENS,
    ScoringError,
    extract_values,
    label_probabilities,
    label_scores,
)
from app.synthesis.tasks import TaskSpec
from tests.synthesis.fake_backend import FakeBackend

TOY = {
    "name": "toy",
    "kind": "classification",
    "instruction": "Given a type, write a question of that type.",
    "icl_instruction": "Classify the questions by type.",
    "text_field": "Question",
    "label_field": "Type",
    "labels": ["w5", "w7"],
}
HIT, MISS = 1 / 1.01, 0.01 / 1.01  # the fake gives 1 to the wanted token, 0.01 to others


def _task(labels: list[str]) -> TaskSpec:
    return TaskSpec.model_validate({**TOY, "labels": labels})


def test_shared_first_tokens_are_scored_along_their_tokens_in_one_call() -> None:
    backend = FakeBackend(stop_after=None)  # n tokens past "Question:" it wants w{n}
    # Query "a": then "\n", "Type:" are tokens 2 and 3 past the marker, so w3 is wanted first.
    scores = label_scores(backend, _task(["w3 w1", "w3 w4", "w9"]), "", "a")
    # One call, two prompts: "w3" (shared) vs "w9" after the context (w3 wanted), then
    # "w1" vs "w4" after "w3" (w4 wanted).
    [(kind, prompts)] = backend.calls
    assert kind == "probs" and len(prompts) == 2
    assert scores == pytest.approx({"w3 w1": HIT * MISS, "w3 w4": HIT * HIT, "w9": MISS})
    assert sum(scores.values()) == pytest.approx(1.0)


def test_an_answer_that_is_a_prefix_of_another_gets_a_newline() -> None:
    backend = FakeBackend(stop_after=None)
    scores = label_scores(backend, _task(["w3", "w3 w4"]), "", "a")
    assert scores == pytest.approx({"w3": MISS, "w3 w4": HIT})


def test_labels_with_the_same_tokens_are_refused_by_name() -> None:
    words = {"a": "x y", "b": "x  y"}  # different words, the same (whitespace) tokens
    task = TaskSpec.model_validate({**TOY, "labels": ["a", "b"], "verbalisers": words})
    with pytest.raises(ScoringError, match="labels 'a' and 'b' have the same tokens"):
        label_probabilities(FakeBackend(), task, "", ["q"])
    # /complete reports it as a 4xx (InvalidError), naming the labels, not the query.
    source = PromptSource("p", task, "")
    with pytest.raises(InvalidError, match="cannot be told apart") as err:
        complete(source, "secret query", StaticProvider(FakeBackend()))
    assert "secret" not in str(err.value)


def test_audit_scores_are_the_complete_scores_of_the_true_label() -> None:
    # Labels sharing a first token: the first-token audit refused them ("share a first token").
    task = _task(["w3 w1", "w3 w4", "w9"])
    candidates = [Record("a", "w3 w4"), Record("a b", "w3 w1"), Record("c", "w9")]
    backend = FakeBackend(stop_after=None)
    audit = score_candidates(task, backend, "", candidates)
    served = []
    for candidate in candidates:
        answer = complete(PromptSource("p", task, ""), candidate.text, StaticProvider(backend))
        assert answer.scores is not None
        served.append(answer.scores[candidate.label])
    assert audit == pytest.approx(served)
    assert audit[0] == pytest.approx(HIT * HIT)


def test_extraction_generates_up_to_the_limit_complete_serves() -> None:
    task = TaskSpec.model_validate(
        {**TOY, "kind": "extraction", "labels": [], "slot": "genre", "label_field": "Genre"}
    )
    backend = FakeBackend(stop_after=None)  # top-1 is always w0: the line never ends
    [value] = extract_values(backend, task, "", ["a film"])
    assert value == " ".join(["w0"] * MAX_EXTRACTION_TOKENS)
    assert complete(PromptSource("p", task, ""), "a film", StaticProvider(backend)).value == value
