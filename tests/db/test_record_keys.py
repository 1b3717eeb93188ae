"""The data keys of the records (app.db.record_keys): sealing, destruction, rotation."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag

from app.db.record_keys import KEK_FILE, RecordKeyError, RecordKeys, open_sealed

ROWS = [("the patient reports chest pain", "cardio"), ("a rash on the left arm", "derm")]


def test_records_open_only_with_their_datasets_key_and_context(tmp_path: Path) -> None:
    keys = RecordKeys(tmp_path / "keys")
    sealed = keys.seal_records("d1", ROWS)
    assert keys.open_records("d1", sealed) == ROWS
    assert all(ROWS[0][0].encode() not in value for value in sealed)
    keys.create("d2")
    with pytest.raises(InvalidTag):  # another dataset's key
        keys.open_records("d2", sealed)
    with pytest.raises(InvalidTag):  # the right key, moved to another dataset's rows
        open_sealed(keys.get("d1"), sealed[0], b"d2")
    tampered = sealed[0][:-1] + bytes([sealed[0][-1] ^ 1])
    with pytest.raises(InvalidTag):
        keys.open_records("d1", [tampered])


def test_files_are_private_and_hold_no_key_in_the_clear(tmp_path: Path) -> None:
    keys = RecordKeys(tmp_path / "keys")
    key = keys.create("d1")
    folder = tmp_path / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in (folder / KEK_FILE, folder / "d1.key"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = base64.b64decode((folder / "d1.key").read_bytes())
    assert key not in stored  # wrapped by the key-encryption key


def test_a_destroyed_key_cannot_be_had_from_any_process(tmp_path: Path) -> None:
    keys = RecordKeys(tmp_path / "keys")
    sealed = keys.seal_records("d1", ROWS)
    other = RecordKeys(tmp_path / "keys")  # another process's view, reading the files
    assert other.open_records("d1", sealed) == ROWS
    assert keys.destroy("d1") and not (tmp_path / "keys" / "d1.key").exists()
    fresh = RecordKeys(tmp_path / "keys")
    with pytest.raises(RecordKeyError, match="cannot be read"):
        fresh.open_records("d1", sealed)
    assert not keys.destroy("d1")  # already gone


def test_rotating_the_kek_rewraps_every_key_and_leaves_records_alone(tmp_path: Path) -> None:
    keys = RecordKeys(tmp_path / "keys")
    sealed = {d: keys.seal_records(d, ROWS) for d in ("d1", "d2", "d3")}
    old_kek = keys.kek
    new_kek = bytes(range(32))
    assert keys.rewrap(new_kek) == 3
    after = RecordKeys(tmp_path / "keys")  # reads the kek file: the new one
    assert after.kek == new_kek
    assert all(after.open_records(d, s) == ROWS for d, s in sealed.items())
    with pytest.raises(InvalidTag):  # the old kek no longer opens the wrapped keys
        RecordKeys(tmp_path / "keys", old_kek).get("d1")


def test_a_dataset_id_is_a_file_name_of_letters_and_digits_only(tmp_path: Path) -> None:
    with pytest.raises(RecordKeyError):
        RecordKeys(tmp_path).create("../escape")


def test_the_rotate_command_rewraps_the_folders_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from app.cli import app as cli
    from app.db import record_keys

    folder = tmp_path / "keys"
    keys = RecordKeys(folder)
    sealed = {d: keys.seal_records(d, ROWS) for d in ("d1", "d2")}
    old_kek = (folder / KEK_FILE).read_bytes()
    monkeypatch.setenv("DPSYN_RECORD_KEYS_DIR", str(folder))
    monkeypatch.setattr(record_keys, "_CURRENT", None)
    result = CliRunner().invoke(cli, ["admin", "records", "rotate-kek"])
    assert result.exit_code == 0, result.output
    assert "2 data keys rewrapped" in result.output
    assert (folder / KEK_FILE).read_bytes() != old_kek
    assert not (folder / "kek.next").exists()
    fresh = RecordKeys(folder)
    assert all(fresh.open_records(d, s) == ROWS for d, s in sealed.items())


def test_a_rotation_stopped_half_way_still_opens_every_key(tmp_path: Path) -> None:
    keys = RecordKeys(tmp_path / "keys")
    sealed = {d: keys.seal_records(d, ROWS) for d in ("d1", "d2")}
    new_kek = bytes(range(32))
    # as if the rotation stopped after d1: kek.next written, d1 rewrapped, kek not replaced
    (tmp_path / "keys" / "kek.next").write_bytes(base64.b64encode(new_kek))
    wrapped = keys._unwrap("d1", base64.b64decode((tmp_path / "keys" / "d1.key").read_bytes()))
    from app.db.record_keys import _write_private, seal

    _write_private(
        tmp_path / "keys" / "d1.key", base64.b64encode(seal(new_kek, wrapped, b"dpsyn data key d1"))
    )
    fresh = RecordKeys(tmp_path / "keys")
    assert all(fresh.open_records(d, s) == ROWS for d, s in sealed.items())
    assert fresh.rewrap(new_kek) == 2  # running it again completes it
    assert all(RecordKeys(tmp_path / "keys").open_records(d, s) == ROWS for d, s in sealed.items())
