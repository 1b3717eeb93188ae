"""Where the shared benchmark files of each built-in task are, and loading them."""

from __future__ import annotations

import os
from pathlib import Path

from app.synthesis.data import Record, load_dataset
from app.synthesis.tasks import BUILTIN_TASKS

REPO_ROOT = Path(__file__).resolve().parents[2]

# task -> (train file, test file), relative to the data folder
FILES: dict[str, tuple[str, str]] = {
    "trec": ("trec/train.txt", "trec/test.txt"),
    "trec14": ("trec/train.txt", "trec/test.txt"),
    "sst2": ("sst2/stsa.binary.train", "sst2/stsa.binary.test"),
    "agnews": ("agnews/train_first10429.csv", "agnews/test.csv"),
    "mitg": ("mit_movies/train", "mit_movies/test"),
    "mitd": ("mit_movies/train", "mit_movies/test"),
}
DATASETS = tuple(FILES)
# unlabelled public inputs for PromptPATE, as in the PromptPATE paper (IMDB for SST-2)
PUBLIC_FILES: dict[str, str] = {"sst2": "imdb/test_sample2000.jsonl"}


def default_data_dir() -> Path:
    """``$DATA_DIR`` if set, else ``../shared/data`` next to the repository."""
    env = os.environ.get("DATA_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


def paths(dataset: str, data_dir: Path | None = None) -> tuple[Path, Path]:
    """The (train, test) files of a built-in task."""
    if dataset not in FILES:
        raise ValueError(f"unknown dataset {dataset!r} (choose from {', '.join(DATASETS)})")
    root = data_dir if data_dir is not None else default_data_dir()
    train, test = FILES[dataset]
    return root / train, root / test


def public_path(dataset: str, data_dir: Path | None = None) -> Path | None:
    """The default public inputs of a built-in task, if it has some."""
    name = PUBLIC_FILES.get(dataset)
    root = data_dir if data_dir is not None else default_data_dir()
    return None if name is None else root / name


def load_split(dataset: str, data_dir: Path | None = None) -> tuple[list[Record], list[Record]]:
    """The task's (train, test) records, read by the project's dataset readers."""
    train, test = paths(dataset, data_dir)
    task = BUILTIN_TASKS[dataset]
    return load_dataset(task, train), load_dataset(task, test)
