"""The helpers that decide whether a test without its model or data skips or fails
(tests/conftest.py): under REQUIRE_SERVICES=1 (scripts/test.sh, .ci/run) a missing piece
fails the test, and either way the message names the piece and what provides it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import conftest
from tests.conftest import require_model, require_shared_data, shared_data_dir

SKIPPED, FAILED = pytest.skip.Exception, pytest.fail.Exception


@pytest.mark.parametrize(("required", "outcome"), [("1", FAILED), ("0", SKIPPED)])
def test_missing_shared_data_fails_when_required_and_names_the_file_and_the_place(
    tmp_path, monkeypatch, required, outcome
):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("REQUIRE_SERVICES", required)
    (tmp_path / "trec").mkdir()
    (tmp_path / "trec" / "train.txt").write_text("DESC:def what is it ?\n")
    with pytest.raises(outcome) as raised:
        require_shared_data("trec/train.txt", "sst2/stsa.binary.train")
    message = str(raised.value)
    assert "sst2/stsa.binary.train not found in" in message and str(tmp_path) in message
    assert "trec/train.txt" not in message  # only what is missing
    assert "../shared/data" in message and "DATA_DIR" in message
    assert ("REQUIRE_SERVICES=1" in message) == (required == "1")


def test_a_missing_data_folder_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("REQUIRE_SERVICES", "1")
    with pytest.raises(FAILED, match=r"the folder .*nowhere does not exist \(expected at"):
        require_shared_data()


def test_present_shared_data_returns_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("REQUIRE_SERVICES", "1")
    (tmp_path / "imdb.jsonl").write_text("{}\n")
    assert shared_data_dir() == tmp_path
    assert require_shared_data(tmp_path / "imdb.jsonl") == tmp_path  # an absolute path too
    assert require_shared_data() == tmp_path


def test_without_data_dir_the_data_is_expected_beside_the_repository(monkeypatch):
    monkeypatch.delenv("DATA_DIR", raising=False)
    repository = Path(conftest.__file__).resolve().parents[1]
    assert shared_data_dir() == repository.parent / "shared" / "data"


@pytest.mark.parametrize(("required", "outcome"), [("1", FAILED), ("0", SKIPPED)])
def test_a_missing_model_package_fails_when_required_and_names_the_installer(
    monkeypatch, required, outcome
):
    monkeypatch.setenv("REQUIRE_SERVICES", required)
    packages = {**conftest.MODEL_PACKAGES, "tiny": ("numpy", "dpsyn_no_such_model_part")}
    monkeypatch.setattr(conftest, "MODEL_PACKAGES", packages)
    with pytest.raises(outcome) as raised:
        require_model("tiny")
    message = str(raised.value)
    assert "the packaged model tiny is missing" in message
    assert "dpsyn_no_such_model_part" in message and "numpy" not in message
    assert "scripts/setup.sh installs it" in message


def test_the_packaged_models_that_setup_installs_are_found(monkeypatch):
    monkeypatch.setenv("REQUIRE_SERVICES", "1")
    require_model()  # Gemma, the default
    require_model("smollm2-135m")
