"""The local engine's lock goes to whoever has had the engine least (app.llm.fair_lock).

The first test is the lock alone, with threads that hold it for a few milliseconds; the
second is a real short answer beside a real long one on the packaged model.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from app.llm.base import LLMBackend
from app.llm.fair_lock import FairLock, Share
from app.llm.generation import GenerationParams, local_generate
from app.llm.retry import RetryingBackend, RetryPolicy


class Logged:
    """A share that notes its name in ``log`` each time it gets the engine."""

    def __init__(self, share: Share, log: list[str]) -> None:
        self.share, self.log = share, log

    def __enter__(self) -> Logged:
        self.share.__enter__()
        self.log.append(self.share.name)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, t: TracebackType | None
    ) -> None:
        self.share.__exit__(kind, error, t)


def _calls_between(log: list[str], start: int, name: str, other: str) -> int:
    """Calls of ``other`` in ``log`` after ``start`` and before ``name``'s last."""
    last = max(i for i, who in enumerate(log) if who == name)
    return sum(1 for who in log[start:last] if who == other)


def test_a_newcomer_gets_the_lock_before_a_long_user_at_every_release() -> None:
    lock, log = FairLock(), []
    long_user, short_user = Logged(lock.share("long"), log), Logged(lock.share("short"), log)
    started = threading.Event()
    asked_at: list[int] = []

    def use(who: Logged, calls: int, hold_s: float) -> None:
        for _ in range(calls):
            with who:
                started.set()
                time.sleep(hold_s)

    long_thread = threading.Thread(target=use, args=(long_user, 60, 0.01))
    long_thread.start()
    started.wait()
    time.sleep(0.1)  # the long user has had the lock for some calls
    asked_at.append(len(log))
    use(short_user, 5, 0.01)
    long_thread.join()
    # Once asked, the short user's five calls run one after another; at most the long user's
    # call in progress (and one that raced the first ask) comes between.
    assert _calls_between(log, asked_at[0], "short", "long") <= 2, log
    assert log.count("long") == 60 and log.count("short") == 5


def test_jobs_share_one_account_and_yield_to_an_answer() -> None:
    lock, log = FairLock(), []
    answer = Logged(lock.share("answer"), log)
    started = threading.Event()

    def job() -> None:
        for _ in range(40):
            with lock:  # a job takes the lock for the background share
                log.append("job")
                started.set()
                time.sleep(0.01)

    thread = threading.Thread(target=job)
    thread.start()
    started.wait()
    time.sleep(0.05)
    asked = len(log)
    for _ in range(4):
        with answer:
            time.sleep(0.01)
    thread.join()
    assert _calls_between(log, asked, "answer", "job") <= 2, log
    assert lock.background.held_s > 0.3 and lock.waiting() == 0


def test_a_short_answer_beside_a_long_one_waits_for_few_of_its_calls(gemma) -> None:
    """A real 900-token answer on the packaged model, and a short one asked while it
    reads its prompt: the short one's calls come first at every release."""
    lock, log = FairLock(), []
    policy = RetryPolicy(retries=0)

    def backend(name: str) -> LLMBackend:
        return RetryingBackend(gemma, retry=policy, lock=Logged(lock.share(name), log))

    words = " ".join(f"line {i}: the river runs past the old mill" for i in range(100))
    long_prompt = gemma.detokenize(gemma.tokenize(words)[:900])
    reading = threading.Event()

    def long_answer() -> None:
        pieces = local_generate(backend("long"), long_prompt, GenerationParams(max_tokens=2))
        reading.set()  # the generator runs from its first next()
        list(pieces)

    thread = threading.Thread(target=long_answer)
    thread.start()
    reading.wait()
    while log.count("long") < 3:  # the long answer is reading its prompt
        time.sleep(0.01)
    asked = len(log)
    short = list(
        local_generate(backend("short"), "The capital of France is", GenerationParams(max_tokens=3))
    )
    thread.join()
    assert short and log.count("short") >= 4  # tokenize, then a pass per token
    assert _calls_between(log, asked, "short", "long") <= 2, log
