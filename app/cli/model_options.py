"""The local model's options, shared by ``dpsyn synthesize``, ``dpsyn eval`` and ``dpsyn
audit``, and the precision rule of a run that trains. (Kept apart from
:mod:`app.cli.options`, which the thin HTTP client imports: this one loads the backends.)"""

from __future__ import annotations

import os
import sys
from typing import Annotated, TextIO

import typer

from app.llm.factory import Dtype

ModelOpt = Annotated[
    str | None, typer.Option("--model", help="gemma-3-270m, smollm2-135m, or a path.")
]
DtypeOpt = Annotated[
    Dtype,
    typer.Option(
        "--dtype",
        help="Local model precision (auto: bfloat16 if native; float32 for a method that trains).",
    ),
]


def training_dtype(trains: bool, dtype: Dtype) -> Dtype:
    """The local model's precision: ``auto`` means float32 for a run that trains (measured on
    this project's 2-core CPU with native bfloat16: a DP-SGD step of 16 SST-2 examples takes
    3.2 s in float32 and 18-20 s in bfloat16, whose backward pass is slow)."""
    return Dtype.FLOAT32 if trains and dtype is Dtype.AUTO else dtype


def quiet_progress_bars(stream: TextIO | None = None) -> None:
    """Turn off third-party progress bars (transformers' "Loading weights", the Hub's
    downloads) when ``stream`` (stderr) is not a terminal: in a log file or a pipe a bar is
    hundreds of carriage-return frames. dpsyn's own progress (plain lines off a terminal,
    :mod:`app.cli.progress`) stays. Call it before a model is loaded; a user's explicit
    ``HF_HUB_DISABLE_PROGRESS_BARS`` wins."""
    if (stream or sys.stderr).isatty() or "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ:
        return
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # transformers reads this switch when it is imported
    if "transformers" in sys.modules:  # imported already: its own switch
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
