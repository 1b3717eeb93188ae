"""The packaged model is converted once, whatever starts at the same time (issue 31).

Issue 31's fresh machine: two pytest-xdist workers found no converted model, both wrote the
one fixed ``<key>.partial`` folder, and the loser failed on ``rename`` (``Directory not
empty``), leaving 1.1 GB behind. These tests start real processes on an empty
``DPSYN_CACHE_DIR``: three at once with a slow stand-in converter (the protocol, in seconds),
one killed with SIGKILL in the middle of converting (what it leaves must not trip the next
start), and three at once loading the real light model through ``TransformersBackend``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from safetensors import safe_open

from tests.conftest import require_model

ROOT = Path(__file__).resolve().parents[2]

# A process that converts "model" with a stand-in for the de-quantisation: it writes its pid
# in a file of the folder being built, a marker in a shared log, sleeps, then the mark file.
STAND_IN = """
import os, sys, time
from pathlib import Path
import app.llm.conversion as conversion

def slow_write(gguf, target):
    target.mkdir()
    with open(sys.argv[2], "a") as log:
        log.write(f"{os.getpid()}\\n")
    (target / "converter").write_text(str(os.getpid()))
    time.sleep(float(sys.argv[3]))
    (target / "config.json").write_text("{}")

conversion.write_converted = slow_write
folder = conversion.ensure_converted(lambda scratch: Path("unused.gguf"), Path(sys.argv[1]))
print((folder / "converter").read_text())
"""


def start_converter(folder: Path, log: Path, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(folder), str(log), str(seconds)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out.strip()


def test_three_processes_at_once_convert_once_and_all_succeed(tmp_path):
    folder, log = tmp_path / "models" / "m", tmp_path / "converters.log"
    processes = [start_converter(folder, log, seconds=1.5) for _ in range(3)]
    answers = [finish(process) for process in processes]
    converters = log.read_text().split()
    assert len(converters) == 1  # the two others waited and read its copy
    assert answers == converters * 3  # every process uses the one published copy
    assert sorted(p.name for p in folder.parent.iterdir()) == ["m", "m.lock"]


def test_a_killed_conversion_leaves_nothing_that_trips_the_next_start(tmp_path):
    folder, log = tmp_path / "models" / "m", tmp_path / "converters.log"
    victim = start_converter(folder, log, seconds=60)
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().strip()):  # it is converting now
        assert time.monotonic() < deadline and victim.poll() is None, victim.stderr
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert [p.name for p in folder.parent.glob("m.tmp-*")]  # it did leave a half copy
    assert not folder.exists()
    survivor = finish(start_converter(folder, log, seconds=0))
    assert survivor == log.read_text().split()[-1] != log.read_text().split()[0]
    assert sorted(p.name for p in folder.parent.iterdir()) == ["m", "m.lock"]


def test_the_old_protocols_leftovers_are_removed(tmp_path):
    """What the old code left on a machine (issue 31): a ``.partial`` folder, and a folder
    renamed into place without its mark. Neither is taken for a model."""
    models = tmp_path / "models"
    (models / "m.partial").mkdir(parents=True)
    (models / "m.partial" / "model.safetensors").write_bytes(b"half")
    (models / "m").mkdir()
    (models / "m" / "tokenizer.json").write_text("{}")
    finish(start_converter(models / "m", tmp_path / "log", seconds=0))
    assert sorted(p.name for p in models.iterdir()) == ["m", "m.lock"]
    assert (models / "m" / "converter").exists()


LOAD = """
import sys
import numpy as np
from app.llm.transformers_backend import TransformersBackend
backend = TransformersBackend("smollm2-135m", dtype="float32")
ids = backend.tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
probs = backend.next_token_probs([ids], np.arange(50)[None, :])
np.save(sys.argv[1], probs)
"""


def test_three_real_first_loads_at_once_share_one_conversion(tmp_path):
    """Three processes load the real light model on an empty cache at once: all succeed,
    agree, and the cache holds one model folder (and no temporary or GGUF copy)."""
    require_model("smollm2-135m")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPSYN_CACHE_DIR": str(tmp_path / "cache")}
    outputs = [tmp_path / f"probs{n}.npy" for n in range(3)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD, str(out)], cwd=ROOT, env=env, stderr=subprocess.PIPE
        )
        for out in outputs
    ]
    for process in processes:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err.decode()[-2000:]
    first, *others = (np.load(out) for out in outputs)
    for other in others:
        np.testing.assert_array_equal(other, first)
    models = tmp_path / "cache" / "models"
    assert sorted(p.name for p in models.iterdir()) == ["smollm2-135m", "smollm2-135m.lock"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["models"]
    # The output layer stays tied to the embedding, as in the GGUF: one copy in the file.
    config = json.loads((models / "smollm2-135m" / "config.json").read_text())
    with safe_open(models / "smollm2-135m" / "model.safetensors", "pt") as weights:
        names = set(weights.keys())
    assert config["tie_word_embeddings"] and "lm_head.weight" not in names


def test_the_packaged_gemma_is_joined_in_the_scratch_folder(tmp_path):
    """The packaged Gemma's parts are joined (and checked against the package's SHA-256 by
    its ``assemble``) in the scratch folder the conversion removes afterwards, so no 250 MB
    GGUF stays in the cache, and no half-joined one shared by processes can trip a start."""
    require_model("gemma-3-270m")
    from app.llm.models import resolve

    source = resolve("gemma-3-270m")
    assert source.gguf is not None
    gguf = source.gguf(tmp_path)
    assert gguf.parent == tmp_path and gguf.stat().st_size > 100_000_000


def _tiny_gguf(path: Path) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"t{n}" for n in range(50)])
    writer.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_conversion_parses_each_gguf_once(tmp_path):
    """transformers opens the GGUF three times in a conversion (configuration, tokenizer,
    weights); within the conversion each opening of one file gets the same parsed reader
    (two thirds of Gemma's conversion was parsing its vocabulary three times), another file
    its own, and outside it the library's reader is back."""
    import gguf

    from app.llm.conversion import _one_reading_of_each_gguf

    first, second = _tiny_gguf(tmp_path / "a.gguf"), _tiny_gguf(tmp_path / "b.gguf")
    original = gguf.GGUFReader
    with _one_reading_of_each_gguf():
        reader = gguf.GGUFReader(first)
        assert gguf.GGUFReader(str(first)) is reader
        other = gguf.GGUFReader(second)
        assert other is not reader and Path(other.data.filename) == second.resolve()
        assert [t.name for t in reader.tensors] == ["w"]
    assert gguf.GGUFReader is original
    assert gguf.GGUFReader(first) is not reader
