"""The flock of teachers: disjoint few-shot prompts over the private records, and their votes.

**Partition.** A record goes to teacher ``HMAC(key, "bucket" | record) mod E`` and, within
its teacher's share, is ranked by ``HMAC(key, "order" | record)``; a teacher's prompt holds the
``shots`` first-ranked records of its share, and a teacher whose share has fewer records
abstains (casts no vote). ``key`` is 32 bytes drawn from the job's noise generator, used only
here and never stored, logged or returned.

**Why one record changes at most one teacher (add/remove).** A record's teacher and rank
depend only on the record itself and the key, never on the other records. Adding a record r
puts it into exactly one share, that of teacher ``h(r)``; every other share keeps exactly the
same records, hence the same ranking and the same prompt. Removing r likewise changes only
the share of ``h(r)``. So the vote histogram changes by at most one vote moving (or appearing,
or disappearing), which is the sensitivity ``app.privacy.pate`` prices. A replace-one
neighbour is a removal and an addition: at most two teachers. A partition by position (e.g.
"records 0..k to teacher 0") would not have this property: one added record shifts every
later teacher's share. The keyed hash also keeps the partition secret (an unkeyed hash would
let anyone who knows a record predict its teacher), and identical records fall into the same
share, where they give the same prompt whichever comes first.

**Votes.** A teacher's prompt is the task's downstream ICL prompt
(:func:`app.synthesis.prompts.demonstration_prompt`: the ICL instruction and the teacher's
examples as demonstrations); its vote on a public input is the label the backend scores
highest after the input (:func:`app.synthesis.scoring.label_probabilities`, the scorer
``/complete`` answers with: the first token of each label's verbaliser, or the label trie
when verbalisers share tokens). One backend call per
teacher covers a whole group of public inputs, all continuing the same teacher prompt, so the
transformers backend computes that shared prefix once.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence

import numpy as np

from app.llm.base import LLMBackend
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import TaskSpec

KEY_BYTES = 32
_BUCKET, _ORDER = b"dpsyn-pate-bucket\x00", b"dpsyn-pate-order\x00"


def draw_key(rng: np.random.Generator) -> bytes:
    """A fresh secret partition key from the job's generator (OS-seeded in production)."""
    return rng.bytes(KEY_BYTES)


def _digest(key: bytes, purpose: bytes, record: Record) -> int:
    text, label = record.text.encode("utf-8"), record.label.encode("utf-8")
    # Length-prefixed fields: ("ab", "c") and ("a", "bc") must not hash alike.
    message = purpose + len(text).to_bytes(8, "big") + text + label
    return int.from_bytes(hmac.new(key, message, hashlib.sha256).digest(), "big")


def partition(records: Sequence[Record], teachers: int, key: bytes) -> list[list[Record]]:
    """Each teacher's share of ``records``, ranked by the second keyed hash.

    The share of a teacher depends only on the records hashed to it (see the module
    docstring), which is what bounds the sensitivity of the vote histogram.
    """
    if teachers < 1:
        raise ValueError(f"teachers must be >= 1, got {teachers}")
    if len(key) < 16:
        raise ValueError("the partition key must be at least 16 bytes")
    shares: list[list[tuple[int, Record]]] = [[] for _ in range(teachers)]
    for record in records:
        bucket = _digest(key, _BUCKET, record) % teachers
        shares[bucket].append((_digest(key, _ORDER, record), record))
    return [[record for _, record in sorted(share, key=lambda x: x[0])] for share in shares]


def teacher_examples(
    records: Sequence[Record], teachers: int, shots: int, key: bytes
) -> list[tuple[Record, ...] | None]:
    """Per teacher, its ``shots`` first-ranked records, or None when its share is short."""
    if shots < 1:
        raise ValueError(f"shots must be >= 1, got {shots}")
    return [
        tuple(share[:shots]) if len(share) >= shots else None
        for share in partition(records, teachers, key)
    ]


def teacher_prompts(
    task: TaskSpec, records: Sequence[Record], teachers: int, shots: int, key: bytes
) -> list[str]:
    """The prompts of the teachers that vote (short teachers abstain and are left out)."""
    return [
        demonstration_prompt(task, list(examples))
        for examples in teacher_examples(records, teachers, shots, key)
        if examples is not None
    ]


def teacher_votes(
    backend: LLMBackend,
    task: TaskSpec,
    prompts: Sequence[str],
    inputs: Sequence[str],
    voted: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Vote histograms: ``len(inputs) x len(task.labels)`` ints, one vote per teacher and input.

    One backend call per teacher over all ``inputs``; ``voted(n)`` is called after the n-th
    teacher's call (a group of inputs takes as many calls as there are teachers, so this is
    how a run shows progress within a group). Nothing here is released: the counts are
    only ever read through Confident-GNMax.
    """
    votes = np.zeros((len(inputs), len(task.labels)), dtype=np.int64)
    if not inputs:
        return votes
    rows = np.arange(len(inputs))
    for n, prompt in enumerate(prompts, start=1):
        probs = label_probabilities(backend, task, prompt, inputs)
        votes[rows, probs.argmax(axis=1)] += 1
        if voted is not None:
            voted(n)
    return votes
