"""Private records sealed at rest: a data key per dataset, kept outside the database.

Before, every record's text and label sat in ``dataset_records`` as plain text, so every
database file, dump, replica and backup carried every private record, and a deleted dataset
lived on in every backup taken before. Now (envelope encryption, as cloud key services
practise it):

* each dataset has a **data key** of its own (AES-256-GCM), made at upload;
* each record is stored as one sealed value, ``nonce || AES-GCM(data key, [text, label])``
  with the dataset's ID as associated data (a sealed record moved to another dataset does not
  open);
* the data keys are kept **outside the database**, each in a file of the key folder
  (``DPSYN_RECORD_KEYS_DIR``, default ``./.dpsyn/record_keys/``, mode 0700, files 0600),
  wrapped by the **key-encryption key** (KEK): ``DPSYN_RECORD_KEK`` (32 bytes, base64) where
  set, else the folder's ``kek`` file, made on first use. The folder is the adapter point for
  a key service: :class:`RecordKeys` is what a KMS client would replace;
* deleting a dataset **destroys its data key** (the file is overwritten, then removed): its
  records cannot be opened from any database backup, taken before or after, because no
  backup of the database holds the key. Back the key folder up on a shorter schedule than the
  database (a restored key folder brings its deleted keys back).

Only the code that runs a job, an advice run or a validation opens records, in memory
(:func:`app.services.datasets.load_records`); the API answers never hold them.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEK_FILE = "kek"
NEXT_KEK_FILE = "kek.next"  # the KEK a rotation under way wraps with
NONCE_BYTES = 12
KEY_BYTES = 32
DEFAULT_DIR = Path(".dpsyn") / "record_keys"


class RecordKeyError(Exception):
    """A data key that cannot be had: destroyed with its dataset, or never made."""


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600, atomically (a temporary file renamed)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def seal(key: bytes, plain: bytes, context: bytes) -> bytes:
    """``nonce || AES-GCM(key, plain)``, bound to ``context`` (associated data)."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plain, context)


def open_sealed(key: bytes, sealed: bytes, context: bytes) -> bytes:
    """The plain bytes of :func:`seal`'s output; raises if the key, the context or a byte of
    ``sealed`` is not the one it was sealed with."""
    return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], context)


class RecordKeys:
    """The data keys of one key folder, wrapped by the KEK (module docstring). Thread-safe;
    a data key read once is kept in memory for the life of the process."""

    def __init__(self, folder: Path, kek: bytes | None = None) -> None:
        self.folder = Path(folder)
        self._kek = kek
        self._cache: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def _ensure_folder(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)

    @property
    def kek(self) -> bytes:
        """The key-encryption key: the one given, else the folder's file (made once)."""
        if self._kek is None:
            self._ensure_folder()
            path = self.folder / KEK_FILE
            if not path.exists():
                _make_kek(path)
            self._kek = base64.b64decode(path.read_bytes().strip())
        return self._kek

    def _path(self, dataset_id: str) -> Path:
        if not dataset_id.isalnum():
            raise RecordKeyError("a dataset ID names a data key file: letters and digits only")
        return self.folder / f"{dataset_id}.key"

    def create(self, dataset_id: str) -> bytes:
        """A new data key for ``dataset_id``, stored wrapped (the dataset's upload)."""
        key = AESGCM.generate_key(bit_length=8 * KEY_BYTES)
        self._ensure_folder()
        wrapped = seal(self.kek, key, b"dpsyn data key " + dataset_id.encode())
        _write_private(self._path(dataset_id), base64.b64encode(wrapped))
        with self._lock:
            self._cache[dataset_id] = key
        return key

    def get(self, dataset_id: str) -> bytes:
        """The dataset's data key; :class:`RecordKeyError` once destroyed."""
        with self._lock:
            found = self._cache.get(dataset_id)
        if found is not None:
            return found
        try:
            wrapped = base64.b64decode(self._path(dataset_id).read_bytes())
        except FileNotFoundError:
            raise RecordKeyError(
                "the dataset's data key is gone (the dataset was deleted, or its records "
                "were dropped): its records cannot be read"
            ) from None
        key = self._unwrap(dataset_id, wrapped)
        with self._lock:
            self._cache[dataset_id] = key
        return key

    def _unwrap(self, dataset_id: str, wrapped: bytes) -> bytes:
        """The data key, by the KEK, or by the next one of a rotation under way (a rotation
        that stopped half-way leaves keys wrapped by either)."""
        context = b"dpsyn data key " + dataset_id.encode()
        try:
            return open_sealed(self.kek, wrapped, context)
        except InvalidTag:
            following = self.folder / NEXT_KEK_FILE
            if not following.exists():
                raise
            return open_sealed(base64.b64decode(following.read_bytes()), wrapped, context)

    def destroy(self, dataset_id: str) -> bool:
        """Overwrite and remove the dataset's data key; whether there was one."""
        with self._lock:
            self._cache.pop(dataset_id, None)
        path = self._path(dataset_id)
        try:
            size = path.stat().st_size
            with open(path, "r+b") as out:
                out.write(secrets.token_bytes(size))
                out.flush()
                os.fsync(out.fileno())
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rewrap(self, new_kek: bytes, *, keep_file: bool = True) -> int:
        """Wrap every data key with ``new_kek`` instead (the records are not touched); the
        number of keys. Safe to run again after a stop half-way: ``new_kek`` is written to
        the folder first (``kek.next``), every key is rewrapped, then it replaces the ``kek``
        file (``keep_file``: the KEK is the folder's own; else it comes from the settings,
        which the operator then changes) and ``kek.next`` is removed."""
        self._ensure_folder()
        _write_private(self.folder / NEXT_KEK_FILE, base64.b64encode(new_kek))
        count = 0
        for path in sorted(self.folder.glob("*.key")):
            dataset_id = path.name.removesuffix(".key")
            key = self._unwrap(dataset_id, base64.b64decode(path.read_bytes()))
            wrapped = seal(new_kek, key, b"dpsyn data key " + dataset_id.encode())
            _write_private(path, base64.b64encode(wrapped))
            count += 1
        if keep_file:
            _write_private(self.folder / KEK_FILE, base64.b64encode(new_kek))
        self._kek = new_kek
        (self.folder / NEXT_KEK_FILE).unlink()
        return count

    def seal_records(self, dataset_id: str, rows: Sequence[tuple[str, str]]) -> list[bytes]:
        """Each (text, label) sealed with the dataset's data key (made if it has none)."""
        try:
            key = self.get(dataset_id)
        except RecordKeyError:
            key = self.create(dataset_id)
        cipher, context = AESGCM(key), dataset_id.encode()
        out = []
        for row in rows:  # one cipher for the batch: making one per record doubled the cost
            nonce = secrets.token_bytes(NONCE_BYTES)
            out.append(nonce + cipher.encrypt(nonce, json.dumps(row).encode(), context))
        return out

    def open_records(self, dataset_id: str, sealed: Sequence[bytes]) -> list[tuple[str, str]]:
        """The (text, label) of each sealed record (in memory only)."""
        cipher, context = AESGCM(self.get(dataset_id)), dataset_id.encode()
        out = []
        for value in sealed:
            value = bytes(value)
            plain = cipher.decrypt(value[:NONCE_BYTES], value[NONCE_BYTES:], context)
            text, label = json.loads(plain)
            out.append((text, label))
        return out


def _make_kek(path: Path) -> None:
    """A new key-encryption key at ``path``, unless another process made one first: the file
    is written whole under another name, then linked to ``path`` (which fails if it exists),
    so no process ever reads a half-written key."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    _write_private(temporary, base64.b64encode(secrets.token_bytes(KEY_BYTES)))
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # made meanwhile by another process: theirs is the one
    finally:
        temporary.unlink()


_CURRENT: RecordKeys | None = None


def default_folder(database_url: str | None) -> Path:
    """Where the data keys are kept when no folder is set: beside an SQLite database file
    (``record_keys/`` in its folder: ``dpsyn serve``'s data folder, and a ``dpsyn worker`` of
    the same database finds them too), else ``./.dpsyn/record_keys``."""
    if database_url and database_url.startswith("sqlite"):
        from sqlalchemy.engine import make_url

        database = make_url(database_url).database
        if database and database != ":memory:" and not database.startswith("file:"):
            return Path(database).resolve().parent / "record_keys"
    return DEFAULT_DIR


def configure(
    folder: str | Path | None, kek: str | None, database_url: str | None = None
) -> RecordKeys:
    """Make the process's key folder the settings' (the API at start, each worker)."""
    global _CURRENT
    where = Path(folder) if folder else default_folder(database_url)
    given = base64.b64decode(kek) if kek else None
    if given is not None and len(given) != KEY_BYTES:
        raise ValueError(f"DPSYN_RECORD_KEK: {KEY_BYTES} bytes in base64")
    if _CURRENT is None or _CURRENT.folder != where or (given and _CURRENT.kek != given):
        _CURRENT = RecordKeys(where, given)
    return _CURRENT


class KeySettings(Protocol):
    """The settings a key folder is configured from (``app.settings.Settings`` has them)."""

    @property
    def record_keys_dir(self) -> str | None: ...

    @property
    def record_kek(self) -> str | None: ...

    @property
    def database_url(self) -> str: ...


def configure_from(settings: KeySettings) -> RecordKeys:
    """:func:`configure` with the settings' folder, KEK and database."""
    return configure(settings.record_keys_dir, settings.record_kek, settings.database_url)


def current() -> RecordKeys:
    """The process's key folder: the one :func:`configure` set, else the environment's
    settings' (a script or a test that made no app)."""
    if _CURRENT is not None:
        return _CURRENT
    from app.settings import Settings  # here: the settings import the storage layer

    return configure_from(Settings())
