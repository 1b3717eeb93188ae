"""The keyed-hash partition (one record changes at most one teacher) and the teacher votes."""

from __future__ import annotations

import numpy as np
import pytest

from app.pate.teachers import (
    draw_key,
    partition,
    teacher_examples,
    teacher_prompts,
    teacher_votes,
)
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from tests.pate.fake_backend import PateFakeBackend
from tests.pate.helpers import SST2, private_records, public_inputs

KEY = bytes(range(32))


def test_partition_is_disjoint_covers_every_record_and_is_stable():
    records = private_records(60)
    shares = partition(records, 7, KEY)
    assert len(shares) == 7
    flat = [r for share in shares for r in share]
    assert sorted(flat, key=lambda r: r.text) == sorted(records, key=lambda r: r.text)
    # same key, other input order: the same shares in the same ranking
    assert partition(list(reversed(records)), 7, KEY) == shares


def test_a_different_key_gives_a_different_partition():
    records = private_records(60)
    assert partition(records, 7, KEY) != partition(records, 7, bytes(32))


@pytest.mark.parametrize("shots", [1, 2, 3])
def test_adding_or_removing_one_record_changes_at_most_one_teacher(shots):
    records = private_records(80)
    before = teacher_examples(records, 10, shots, KEY)
    changed_somewhere = False
    for i in range(40):
        extra = Record(f"added record {i}", "positive" if i % 2 else "negative")
        after = teacher_examples([*records, extra], 10, shots, KEY)
        diff = [t for t in range(10) if before[t] != after[t]]
        assert len(diff) <= 1
        changed_somewhere |= bool(diff)
        removed = teacher_examples(records[:i] + records[i + 1 :], 10, shots, KEY)
        assert sum(b != a for b, a in zip(before, removed, strict=True)) <= 1
    assert changed_somewhere  # the property is not vacuous: additions do move prompts


def test_short_teachers_abstain():
    records = private_records(5)
    examples = teacher_examples(records, 10, 1, KEY)
    voting = [e for e in examples if e is not None]
    assert 1 <= len(voting) <= 5
    assert all(len(e) == 1 for e in voting)
    assert teacher_examples(records, 10, 6, KEY) == [None] * 10
    assert teacher_prompts(SST2, records, 10, 6, KEY) == []


def test_teacher_prompt_is_the_icl_prompt_of_its_examples():
    records = private_records(30)
    examples = [e for e in teacher_examples(records, 4, 2, KEY) if e is not None]
    prompts = teacher_prompts(SST2, records, 4, 2, KEY)
    assert prompts == [demonstration_prompt(SST2, list(e)) for e in examples]
    assert prompts[0].startswith(SST2.icl_instruction)


def test_draw_key_is_32_bytes_from_the_generator():
    a = draw_key(np.random.default_rng(1))
    assert len(a) == 32
    assert a == draw_key(np.random.default_rng(1)) != draw_key(np.random.default_rng(2))


def test_votes_count_one_vote_per_teacher_and_one_call_per_teacher():
    backend = PateFakeBackend()
    records = private_records(40)
    prompts = teacher_prompts(SST2, records, 8, 1, KEY)
    inputs = public_inputs(good=2, bad=1, mixed=2)
    votes = teacher_votes(backend, SST2, prompts, inputs)
    assert votes.shape == (5, 2) and votes.dtype.kind == "i"
    assert (votes.sum(axis=1) == len(prompts)).all()
    neg, pos = SST2.labels.index("negative"), SST2.labels.index("positive")
    assert (votes[:2, pos] == len(prompts)).all()  # "good": unanimous positive
    assert votes[2, neg] == len(prompts)  # "bad": unanimous negative
    # "mixed": each teacher votes its own example's label
    own = [e[0].label for e in teacher_examples(records, 8, 1, KEY) if e is not None]
    assert votes[3, pos] == own.count("positive") and votes[3, neg] == own.count("negative")
    assert len(backend.calls) == len(prompts)
    assert all(len(call) == len(inputs) for call in backend.calls)


def test_votes_of_no_inputs_or_no_teachers_are_empty():
    backend = PateFakeBackend()
    assert teacher_votes(backend, SST2, ["x"], []).shape == (0, 2)
    assert (teacher_votes(backend, SST2, [], ["a good one"]) == 0).all()
    assert backend.calls == []
