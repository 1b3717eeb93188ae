"""ICL scoring over deterministic fake backends: accuracy, one call, calibration, extraction."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pytest

from app.eval.icl import accuracy, contextual_calibration, evaluate, exact_match, normalise
from app.synthesis.data import Record
from app.synthesis.scoring import extract_values as extract
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import BUILTIN_TASKS, TaskKind, TaskSpec

EOS, NEWLINE = 0, 1


class WordBackend:
    """Word tokenizer. After the prompt's last text-field line, favours the token of any
    word that also appears in that query line (weight ``hit``), on top of ``bias`` per word.
    Greedy generation (top_k) emits ``emit`` words taken from the query, then a newline."""

    name = "words"
    eos_id = EOS

    def __init__(self, marker: str, bias: dict[str, float] | None = None, hit: float = 10.0):
        self.marker = marker
        self.bias = bias or {}
        self.hit = hit
        self.vocab: dict[str, int] = {"<eos>": EOS, "\n": NEWLINE}
        self.calls: list[tuple[str, int]] = []

    @property
    def newline_ids(self) -> frozenset[int]:
        return frozenset({NEWLINE})

    def _id(self, word: str) -> int:
        return self.vocab.setdefault(word, len(self.vocab))

    def tokenize(self, text: str) -> list[int]:
        return [self._id(w) for w in re.findall(r"\n|[^\s]+", text)]

    def detokenize(self, ids: Sequence[int]) -> str:
        words = {v: k for k, v in self.vocab.items()}
        return " ".join(words[i] for i in ids if i != EOS)

    def _query(self, prompt: Sequence[int]) -> list[str]:
        words = {v: k for k, v in self.vocab.items()}
        marker = self.vocab[self.marker]
        start = max(i for i, t in enumerate(prompt) if t == marker) + 1
        end = prompt.index(NEWLINE, start) if NEWLINE in prompt[start:] else len(prompt)
        return [words[t] for t in prompt[start:end]]

    def next_token_probs(self, prompts, token_sets):
        self.calls.append(("probs", len(prompts)))
        words = {v: k for k, v in self.vocab.items()}
        out = np.zeros(token_sets.shape)
        for row, prompt in enumerate(prompts):
            query = self._query(list(prompt))
            for col, token in enumerate(token_sets[row]):
                word = words[int(token)]
                out[row, col] = self.bias.get(word, 1.0) * (self.hit if word in query else 1.0)
        return out / out.sum(axis=1, keepdims=True)

    def top_k(self, prompts, k):
        self.calls.append(("top_k", len(prompts)))
        rows = []
        for prompt in prompts:
            query = self._query(list(prompt))
            after = len(prompt) - 1 - max(i for i, t in enumerate(prompt) if t == self._label_id)
            # emit the query's last word with odd case and punctuation, then end the line
            token = self._id(query[-1].upper() + "!") if after == 0 else NEWLINE
            rows.append([token] * k)
        return np.array(rows)

    @property
    def _label_id(self) -> int:
        return self._id("Genre:")


SST2 = BUILTIN_TASKS["sst2"]
TREC = BUILTIN_TASKS["trec"]


def test_accuracy_counts_equal_pairs():
    assert accuracy(["a", "b", "c", "d"], ["a", "x", "c", "y"]) == 0.5
    assert accuracy([], []) == 0.0
    with pytest.raises(ValueError):
        accuracy(["a"], [])


def test_classification_accuracy_with_one_batched_call():
    backend = WordBackend("Question:")
    test = [
        Record("what is the abbreviation of NASA ?", "Abbreviation"),
        Record("which person invented the telephone ?", "Person"),
        Record("name the location of the Eiffel tower", "Location"),
        Record("what number of legs does a spider have ?", "Entity"),  # wrong on purpose
    ]
    prompt = "Classify.\n\nQuestion: who ?\nAnswer Type: person\n\n"
    score = evaluate(backend, TREC, prompt, test, calibrated=True)
    assert score.accuracy == 0.75 and score.n == 4
    # all queries, all labels and the three content-free inputs: exactly one backend call
    assert backend.calls == [("probs", 4 + 3)]
    assert score.calibrated_accuracy == 0.75


def test_label_probabilities_rows_are_distributions():
    backend = WordBackend("Review:")
    probs = label_probabilities(backend, SST2, "", ["so positive", "plain"])
    assert probs.shape == (2, 2)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    assert probs[0, 1] > probs[0, 0] and probs[1, 0] == pytest.approx(0.5)


def test_shared_first_tokens_are_scored_through_the_trie_in_one_call():
    task = TaskSpec(
        name="pairs",
        kind=TaskKind.CLASSIFICATION,
        instruction="i",
        icl_instruction="c",
        text_field="Text",
        label_field="Label",
        labels=("a", "b"),
        verbalisers={"a": "very good", "b": "very bad"},
    )
    backend = WordBackend("Text:")
    probs = label_probabilities(backend, task, "", ["this is good", "this is bad"])
    assert backend.calls == [("probs", 2)]  # one branching point per query
    assert probs[0].argmax() == 0 and probs[1].argmax() == 1


def test_calibration_fixes_a_biased_prediction():
    # The model prefers "negative" a priori (bias 1.6 vs 0.5); the query's evidence for
    # "positive" (x3) is not enough without calibration, but is after it.
    backend = WordBackend("Review:", bias={"negative": 1.6, "positive": 0.5}, hit=3.0)
    test = [Record("a positive film", "positive"), Record("a negative film", "negative")]
    score = evaluate(backend, SST2, "", test, calibrated=True)
    assert score.accuracy == 0.5  # the positive review is predicted negative
    assert score.calibrated_accuracy == 1.0


def test_contextual_calibration_divides_by_the_mean_content_free_distribution():
    probs = np.array([[0.6, 0.4]])
    content_free = np.array([[0.8, 0.2], [0.6, 0.4]])  # mean 0.7, 0.3
    fixed = contextual_calibration(probs, content_free)
    expected = np.array([0.6 / 0.7, 0.4 / 0.3])
    np.testing.assert_allclose(fixed[0], expected / expected.sum())


def test_uncalibrated_evaluation_reports_no_calibrated_accuracy():
    backend = WordBackend("Review:")
    score = evaluate(backend, SST2, "", [Record("positive", "positive")], calibrated=False)
    assert score.calibrated_accuracy is None and backend.calls == [("probs", 1)]


def test_normalise_and_exact_match():
    assert normalise("  Sci-Fi!  ") == "sci fi"
    assert normalise("Steven   SPIELBERG.") == "steven spielberg"
    assert exact_match("Comedy!", "comedy")
    assert exact_match(" comedy ", "Comedy")
    assert not exact_match("comedy drama", "comedy")


def test_extraction_generates_greedily_to_the_line_end_and_matches_normalised():
    backend = WordBackend("Sentence:")
    task = BUILTIN_TASKS["mitg"]
    test = [
        Record("a funny film about comedy", "comedy"),
        Record("a scary film about horror", "horror"),
        Record("a film about war", "drama"),
    ]
    predicted = extract(backend, task, "", [r.text for r in test])
    assert predicted == ["COMEDY!", "HORROR!", "WAR!"]
    backend.calls.clear()
    score = evaluate(backend, task, "", test)
    assert score.accuracy == pytest.approx(2 / 3) and score.calibrated_accuracy is None
    # one top_k call per generated token over all unfinished queries
    assert backend.calls == [("top_k", 3), ("top_k", 3)]
