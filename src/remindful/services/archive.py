"""The backup archive's layout, and the checks an archive passes before a restore may use it.

:mod:`remindful.services.backup` writes archives in this layout and restores them; what is checked, and
why current data is never touched before every check passed, is in its module docstring.
:func:`validate_archive` runs those checks while extracting into a staging folder.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO, Any, NamedTuple

from isal import isal_zlib
from isal.igzip import IGzipFile

from remindful.engine import catalog_files
from remindful.errors import StorageError, ValidationError
from remindful.model import MemoryType
from remindful.owned import secret_key

FORMAT = "remindful-backup"
VERSION = 1
MANIFEST = "manifest.json"
CATALOG = "catalog.sqlite3"
CHROMA = "chroma"
ATTACHMENTS = "attachments"
#: The file in the storage directory holding the store's key for its archives' seals (not in any
#: archive: see :func:`seal`).
SEAL_KEY = "archive-seal.key"
#: The archives' gzip level (ISA-L's levels are 0 to 3): a store's vectors and index files hardly
#: compress; zlib's best level (``tarfile``'s) made the archive of 100,000 memories 9 % smaller in
#: ten times the time (21 s against 2: most of a backup's time, and of a restore, which backs the
#: current data up first).
GZIP_LEVEL = 2
#: What ISA-L raises on a damaged deflate stream (its stubs declare it an instance, not a class).
IsalError: type[Exception] = isal_zlib.error  # type: ignore[assignment]


#: The manifest's record of what the archive's rows passed (see :func:`seal`).
ROWS_CHECKED = "rows_checked"


def seal(storage: Path, files: dict[str, Any], rows_checked: dict[str, Any] | None = None) -> str:
    """The seal of an archive this store writes: an HMAC, with the store's own key (made on first
    need), of the manifest's list of files with their digests, and of ``rows_checked`` (the
    manifest's :data:`ROWS_CHECKED`: the redaction every row of the catalog passed and the
    catalog's schema). An archive whose seal :func:`sealed_by` the store confirms is one it wrote
    itself, file for file: its vector-index files may be loaded as they are (a restore of any other
    rebuilds the index from the catalog: loading the HNSW files of an archive someone else made
    would hand their bytes to a C++ parser), and, while the store's redaction and schema are still
    the ones recorded, its catalog is used as it is (any other is rebuilt from its rows, each
    re-checked)."""
    return _seal_with(secret_key(storage / SEAL_KEY), files, rows_checked)


def sealed_by(storage: Path, manifest: dict[str, Any]) -> bool:
    """Whether the store at ``storage`` wrote the archive of ``manifest`` (:func:`seal`), as far as
    its files go (their digests were checked against the manifest as they were extracted)."""
    given = manifest.get("seal")
    try:
        with open(storage / SEAL_KEY, "rb") as f:
            key = f.read()
    except OSError:
        return False  # no key: this store never sealed an archive
    if not isinstance(given, str) or not key:
        return False
    return hmac.compare_digest(_seal_with(key, manifest["files"], manifest.get(ROWS_CHECKED)), given)


def _seal_with(key: bytes, files: dict[str, Any], rows_checked: dict[str, Any] | None) -> str:
    listed = json.dumps(files, sort_keys=True, separators=(",", ":")).encode()
    if rows_checked is not None:  # an archive sealed before the record was kept has none
        listed += b"\n" + json.dumps(rows_checked, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, b"remindful archive seal 1\n" + listed, hashlib.sha256).hexdigest()


def gzip_writer(raw: IO[bytes]) -> IGzipFile:
    """A gzip stream at :data:`GZIP_LEVEL` writing into ``raw`` (a backup's ``.tar.gz``), by ISA-L:
    the standard format, written about ten times as fast as by zlib."""
    return IGzipFile(fileobj=raw, mode="wb", compresslevel=GZIP_LEVEL)


def gzip_reader(path: Path) -> IGzipFile:
    """The uncompressed stream of the ``.tar.gz`` at ``path`` (seekable, as ``tarfile`` reads it)."""
    return IGzipFile(path, mode="rb")


#: A member path deeper or longer than any remindful writes (chroma/<segment>/<file>,
#: attachments/<id>/<file>) is refused before anything is extracted.
MAX_DEPTH = 16
MAX_NAME = 1024


def catalog_counts(path: Path) -> dict[str, int]:
    """Memories per collection in the catalog file at ``path`` (every collection, zeros included).
    Raises StorageError when it is not a readable catalog."""
    found = catalog_files.type_counts(path)
    return {t.collection: int(found.get(t.value, 0)) for t in MemoryType}


class Validated(NamedTuple):
    """An archive :func:`validate_archive` extracted: its manifest, and whether the store sealed it."""

    manifest: dict[str, Any]
    sealed: bool


def validate_archive(path: Path, staging: Path, storage: Path | None = None) -> Validated:
    """Extract ``path`` into ``staging`` checking everything (see :mod:`remindful.services.backup`);
    returns the manifest and whether the store at ``storage`` sealed the archive (:func:`sealed_by`).
    Raises ValidationError naming the problem; ``staging`` may then hold partial files. A sealed
    archive's catalog is, byte for byte, one that passed SQLite's integrity check as the backup was
    written: it is not checked again (6 s of a 1M restore); its counts still are."""
    try:
        with gzip_reader(path) as raw, tarfile.open(fileobj=raw, mode="r:") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member, staging)
            files = {m.name: m for m in members if m.isfile()}
            if MANIFEST not in files:
                raise _bad(path, "it has no manifest.json")
            manifest_file = tar.extractfile(files[MANIFEST])
            assert manifest_file is not None
            manifest = _parse_manifest(path, manifest_file.read())
            listed = manifest["files"]
            if set(listed) != set(files) - {MANIFEST}:
                extra = sorted(set(files) - {MANIFEST} - set(listed))
                missing = sorted(set(listed) - set(files))
                raise _bad(path, f"its files do not match the manifest (extra {extra[:5]}, missing {missing[:5]})")
            if CATALOG not in listed:
                raise _bad(path, "it holds no catalog.sqlite3")
            wrong = [n for n, m in files.items() if n != MANIFEST and m.size != listed[n].get("size")]
            if wrong:
                raise _bad(path, f"the sizes of {wrong[:5]} differ from the manifest")
            needed = sum(m.size for m in files.values())
            if needed > shutil.disk_usage(staging).free:
                raise _bad(path, f"extracting it needs {needed / 1_048_576:.0f} MB, more than the free disk space")
            for name, member in files.items():
                if name != MANIFEST:
                    _extract_checked(tar, member, staging, listed[name], path)
    except (tarfile.TarError, EOFError, OSError, IsalError) as exc:
        raise _bad(path, f"it is not a readable .tar.gz archive (truncated or damaged: {exc})") from None
    sealed = storage is not None and sealed_by(storage, manifest)
    _check_catalog(path, staging / CATALOG, manifest, integrity=not sealed)
    return Validated(manifest, sealed)


def _bad(path: Path, why: str) -> ValidationError:
    return ValidationError("path", f"refusing to restore {path}: {why}. Current data was not touched")


def _check_member(member: tarfile.TarInfo, staging: Path) -> None:
    name = PurePosixPath(member.name)
    if len(name.parts) > MAX_DEPTH or len(member.name) > MAX_NAME:
        raise ValidationError(
            "path",
            f"refusing to restore: the archive path {member.name[:60]!r}… is {len(name.parts)} levels and "
            f"{len(member.name)} characters deep (a remindful backup has at most {MAX_DEPTH} levels and "
            f"{MAX_NAME} characters)",
        )
    if member.issym() or member.islnk():
        raise ValidationError("path", f"refusing to restore: the archive holds a link ({member.name!r})")
    if not (member.isfile() or member.isdir()):
        raise ValidationError("path", f"refusing to restore: {member.name!r} is not a regular file or directory")
    if name.is_absolute() or ".." in name.parts or "\\" in member.name or not member.name.strip("/."):
        raise ValidationError("path", f"refusing to restore: the archive path {member.name!r} escapes the target")
    target = (staging / member.name).resolve()
    if not target.is_relative_to(staging.resolve()):
        raise ValidationError("path", f"refusing to restore: the archive path {member.name!r} escapes the target")


def _parse_manifest(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(raw)
    except ValueError:
        raise _bad(path, "its manifest.json is not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _bad(path, f"it is not a remindful backup (manifest format must be {FORMAT!r})")
    if manifest.get("version") != VERSION:
        raise _bad(path, f"unsupported backup version {manifest.get('version')!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, dict) and "sha256" in v for v in files.values()):
        raise _bad(path, "its manifest has no valid file list")
    return manifest


def _extract_checked(
    tar: tarfile.TarFile, member: tarfile.TarInfo, staging: Path, expected: dict[str, Any], path: Path
) -> None:
    target = staging / member.name
    for folder in reversed(target.relative_to(staging).parents[:-1]):  # each level 0700 (parents=True would not)
        (staging / folder).mkdir(exist_ok=True, mode=0o700)
    source = tar.extractfile(member)
    assert source is not None
    h = hashlib.sha256()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        for block in iter(lambda: source.read(1 << 20), b""):
            h.update(block)
            out.write(block)
    if h.hexdigest() != expected["sha256"]:
        raise _bad(path, f"the checksum of {member.name} does not match the manifest")


def _check_catalog(path: Path, catalog: Path, manifest: dict[str, Any], *, integrity: bool = True) -> None:
    try:
        result = catalog_files.integrity(catalog) if integrity else "ok"
        counts = catalog_counts(catalog)
    except StorageError as exc:
        raise _bad(path, f"its catalog is not a readable SQLite database ({exc})") from None
    if result != "ok":
        raise _bad(path, f"its catalog fails the integrity check ({result})")
    expected = manifest.get("counts") or {}
    if any(counts.get(k, 0) != v for k, v in expected.items()):
        raise _bad(path, f"its catalog counts {counts} differ from the manifest's {expected}")
