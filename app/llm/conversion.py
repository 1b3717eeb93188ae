"""Convert a packaged GGUF once into a plain transformers folder, safely under concurrency.

Loading a GGUF with transformers de-quantises every tensor and converts the tokenizer (15-60 s),
so the first load saves a float32 copy under ``cache_root()/models/<key>`` and later loads read
that (about 3 s). Several processes may find no copy at once: the two pytest-xdist workers of
the test command, two ``dpsyn worker``\\ s on a fresh host, ``scripts/vllm_serve.sh`` beside a
worker. Issue 31 saw the loser of that race fail (every converter wrote one fixed
``<key>.partial`` folder and renamed it) and a 1.1 GB ``.partial`` left behind.

The protocol here:

* **One converter at a time.** A converter holds an exclusive ``flock`` on ``<key>.lock`` beside
  the folder; the others block on it, and when they get it they find the published copy and
  convert nothing. The kernel drops the lock when its holder dies, however it dies.
* **Published atomically.** The converter writes in a temporary folder of its own
  (``<key>.tmp-XXXX``, unique per process) and renames the result to ``<key>``: a reader sees
  either no folder or a complete one. Should the rename still fail because the folder
  appeared (a cache shared by hosts whose locks do not meet), the converter drops its copy
  and uses the one there.
* **Nothing stale trips a later start.** Only the lock holder writes temporaries, so whatever
  temporary it finds (``<key>.tmp-*``, or the old fixed ``<key>.partial``) was left by an
  interrupted conversion and is removed, as is a ``<key>`` folder without ``config.json`` (only
  the old protocol could leave one).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

#: The file whose presence marks a complete transformers folder (written last by the old
#: protocol too; the new one publishes whole folders only).
COMPLETE_MARK = "config.json"


def is_converted(folder: Path) -> bool:
    """Whether ``folder`` holds a complete converted model."""
    return (folder / COMPLETE_MARK).exists()


def ensure_converted(find_gguf: Callable[[Path], Path], folder: Path) -> Path:
    """``folder``, after converting the GGUF into it unless a complete copy is there already.

    ``find_gguf(scratch)`` returns the GGUF file, and may build it in ``scratch``, a private
    folder removed after the conversion (the packaged Gemma is joined from its parts there).
    It is called only when a conversion is needed.

    Safe to call from any number of processes at once: exactly one converts, the others wait
    for it and then read its copy (see the module docstring).
    """
    if is_converted(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(folder.with_name(folder.name + ".lock")):
        if is_converted(folder):  # another process converted while we waited
            return folder
        _remove_leftovers(folder)
        work = Path(tempfile.mkdtemp(prefix=f"{folder.name}.tmp-", dir=folder.parent))
        try:
            scratch, converted = work / "gguf", work / "model"
            scratch.mkdir()
            gguf = find_gguf(scratch)
            log.info("converting %s once into %s (this takes up to a minute)", gguf.name, folder)
            write_converted(gguf, converted)
            _publish(converted, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return folder


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``lock_path`` (created if missing) for the block.

    Opened read-only: ``flock`` needs no write access, so a lock file created by another user
    (an image's build step) still serves."""
    fd = os.open(lock_path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _remove_leftovers(folder: Path) -> None:
    """Remove what an interrupted conversion left; call only while holding the lock."""
    stale = [
        *folder.parent.glob(f"{folder.name}.tmp-*"),
        folder.with_name(folder.name + ".partial"),
    ]
    if folder.exists():  # a folder without its mark: the old protocol's half-published copy
        stale.append(folder)
    for path in stale:
        if path.is_dir():
            log.info("removing %s, left by an interrupted conversion", path)
            shutil.rmtree(path, ignore_errors=True)


def _publish(temporary: Path, folder: Path) -> None:
    """Rename ``temporary`` to ``folder``; if ``folder`` is there already, keep that one.

    ``mkdtemp`` made ``temporary`` private (0700); the published copy is readable by all, as a
    folder made by ``mkdir`` would be (an image converts as root and serves as another user).
    """
    temporary.chmod(0o755)
    try:
        temporary.rename(folder)
    except OSError:
        if not is_converted(folder):
            raise
        log.info("%s was published by another process; using that copy", folder)


def write_converted(gguf: Path, target: Path) -> None:
    """De-quantise ``gguf`` and save it as a float32 transformers folder in ``target``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.initialization import no_init_weights

    with _one_reading_of_each_gguf():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
    # A model loaded from GGUF refuses save_pretrained; copy its de-quantised weights into a
    # plain model of the same configuration. Its random initialisation would be overwritten
    # at once (Gemma: 5 s of CPU), so it is skipped; load_state_dict is strict, so every
    # weight saved is one of the GGUF's.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with no_init_weights():  # which also skips tying the output layer to the embedding
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.tie_weights()
    plain.load_state_dict(quantized.state_dict())
    plain.save_pretrained(target)
    tokenizer.save_pretrained(target)


@contextmanager
def _one_reading_of_each_gguf() -> Iterator[None]:
    """Within the block, every ``gguf.GGUFReader`` of one file is the same reader.

    transformers reads the file three times (the configuration, the tokenizer, the weights),
    and ``GGUFReader`` parses every metadata value in Python: for Gemma's 262,144-token
    vocabulary that is 18 s of CPU a reading, two thirds of the conversion. The reader only
    maps the file and reads it, so one serves all three. Readers are keyed by path and mode,
    so another file read meanwhile gets its own.
    """
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], gguf.GGUFReader] = {}

    def shared(path: os.PathLike[str] | str, mode: str = "r") -> gguf.GGUFReader:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)  # type: ignore[arg-type]
        return readers[key]

    gguf.GGUFReader = shared  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        gguf.GGUFReader = original  # type: ignore[misc]
