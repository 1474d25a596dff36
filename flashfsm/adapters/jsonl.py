"""The JSONL event store: one human-readable file per stream.

Theory of operation. A stream lives in `<directory>/<name>.jsonl`, where `<name>` is the
stream name percent-encoded with nothing left safe (`urllib.parse.quote(stream, safe="")`),
so any name maps to one file name and back. (A name whose encoding is too long for a file
system keeps a prefix and adds a hash, `<prefix>%%<sha256>.jsonl`; `%%` never occurs in an
encoding, and such a file's stream is read from its first event.) Line n (1-based) holds
the event of seq n - 1, encoded by the codec: the file alone is enough to replay the
stream (`read_jsonl_file`).

Writers. An append takes, in order: the store's in-process mutex, an exclusive `flock` on
`<directory>/.flashfsm.lock` (so writers in every process take turns, which is what makes
event ids unique across streams), then an exclusive `flock` on the stream's file. Under
those locks it brings its index up to date (per file: inode, size, lines and the ids; only
bytes appended since the last look are parsed), checks the batch's `expected_seq` and ids,
and writes the whole batch with one `write` on an `O_APPEND` descriptor, then `fsync`s
(`fsync=True`, the default; `fsync=False` leaves the flush to the OS, which survives a
process crash but not a power cut). A new file's directory entry is fsynced too.

Each line is sealed with the CRC-32 of its event's bytes (`codec.seal`: a last member
`"_c":"<hex>"`; the line is the shared encoding layer's `sealed(row)`,
`flashfsm.events.rows`); lines without one (written before checksums) still read, unchecked, and a
store opened `strict=True` (or a read inside `codec.require_checksums()`) refuses them.

Readers take a shared `flock` on the stream's file, so they never see half a write in
progress, and they never change a byte of any file. What a crash can leave is a torn
append: a last fragment with no newline after it (an append writes its newline last). A
read ignores it with a `TornLineWarning`; only a writer cuts it, under its locks, before
its own append, with a `TornLineWarning` and a log line naming the file and the bytes cut:
it was never acknowledged to its writer, so nothing that was is lost. Everything else is
corruption, never cut and never skipped: a complete (newline-terminated) line that fails
its checksum or does not decode, a line out of place, or a last fragment that holds a whole
sealed event followed by other bytes (its newline was damaged) is a `CorruptLogError`
naming the file, stream, line and seq, on every read; appends to that stream are refused.

A store opened `read_only=True` (what the CLI's read commands use) creates nothing, not
even the lock file: a missing directory is `StoreNotFound` (it is not made).

A batch is atomic against other writers and against errors. Against a crash, a batch is
all-or-nothing up to lines: a crash mid-write may keep a prefix of the batch's complete
lines (each a whole event, seqs still contiguous) and cut the rest.

File names are compared as the file system compares them: on a case-insensitive file
system, streams `Job` and `job` share a file (and the store reports a corrupt log). The
lock is `flock`, so the directory must be local (not NFS). Files are 0600, directories the
store creates 0700.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from urllib.parse import quote, unquote

from flashfsm.adapters._files import (
    FILE_MODE,
    create_private_file,
    fcntl,
    fsync_dir,
    fsync_fd,
    make_private_dirs,
)
from flashfsm.adapters.urls import path_url
from flashfsm.errors import StoreNotFound
from flashfsm.events.codec import (
    CHUNK,
    decode_sealed_prefix,
    holds_seal,
    is_sealed,
    strict_mode,
    unseal,
)
from flashfsm.events.errors import (
    CorruptLogError,
    DuplicateEventError,
    EventDecodeError,
    StoreError,
    StoreFullError,
)
from flashfsm.events.light import light_mode
from flashfsm.events.models import Event
from flashfsm.events.rows import check_batch, encode_rows, first_misplaced, sealed

logger = logging.getLogger(__name__)

SUFFIX = ".jsonl"
LOCK_NAME = ".flashfsm.lock"
_MAX_NAME = 180  # bytes of an encoded stream name before it is shortened with a hash
_HASHED = "%%"


class TornLineWarning(RuntimeWarning):
    """A JSONL log ends in a fragment a crash left mid-append: a read ignores it, a writer
    cuts it."""


#: errno values that mean the device (or the user's quota) is full.
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def stream_file_name(stream: str) -> str:
    """The file name (in a store directory) of a stream."""
    encoded = quote(stream, safe="")
    if len(encoded) <= _MAX_NAME:
        return encoded + SUFFIX
    digest = hashlib.sha256(stream.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return encoded[:120] + _HASHED + digest + SUFFIX


def _stream_of_name(name: str) -> str | None:
    """The stream a file name encodes; None when it is hashed (read the first event)."""
    stem = name[: -len(SUFFIX)]
    return None if _HASHED in stem else unquote(stem)


# -- parsing --------------------------------------------------------------------------------


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (without their newline) and the bytes after the last newline."""
    lines = data.split(b"\n")
    return lines[:-1], lines[-1]


def _damaged_tail(tail: bytes) -> bool:
    """Whether a last fragment (no newline after it) is damage rather than a torn append.

    A torn append is a prefix of one sealed line: it holds no whole seal, or it is a whole
    sealed line whose newline had not been written. A fragment holding a whole seal with
    other bytes after it had its newline changed: the event in it was complete.
    """
    return holds_seal(tail) and not (is_sealed(tail) and not holds_seal(tail[:-1]))


def _tail_error(tail: bytes, where: str, stream: str | None, line: int) -> CorruptLogError | None:
    """The corruption a last fragment is, or None (no fragment, or a torn append)."""
    if not tail or not _damaged_tail(tail):
        return None
    return CorruptLogError(
        where,
        stream or "?",
        "the last line holds a whole event but its newline is damaged",
        line=line,
        seq=line - 1,
    )


_ID = attrgetter("id")


def _decode_lines(
    lines: Sequence[bytes], first_seq: int, where: str, stream: str | None, strict: bool = False
) -> list[Event]:
    """Decode lines holding seqs `first_seq`, … of `stream` (None: the first line's), on
    the light path inside `light_reads()`."""
    events, error = decode_sealed_prefix(lines, strict=strict, light=light_mode())
    if stream is None and events:
        stream = events[0].stream
    if events:
        assert stream is not None
        bad = first_misplaced(events, range(first_seq, first_seq + len(events)), stream)
        if bad is not None:
            event, seq = events[bad], first_seq + bad
            raise CorruptLogError(
                where,
                stream,
                f"holds stream {event.stream!r} seq {event.seq} where stream {stream!r} "
                f"seq {seq} belongs",
                line=seq + 1,
                seq=seq,
            )
    if error is not None:
        seq = first_seq + len(events)
        if stream is None:  # not one event decoded: name the stream its file name says
            stream = _stream_of_name(Path(where).name) if where.endswith(SUFFIX) else None
        raise CorruptLogError(where, stream or "?", str(error), line=seq + 1, seq=seq) from error
    return events


def _envelopes(
    lines: Sequence[bytes], first_seq: int, where: str, stream: str | None
) -> tuple[list[str], str | None, CorruptLogError | None]:
    """The ids of lines holding seqs `first_seq`, …, checking only the envelope.

    Appends need the ids and the seq order, not the payloads: a line written by a newer
    flashfsm (an unknown event kind) does not stop other writers. Returns the ids up to
    the first bad line, the stream, and the error that bad line is (None when all are good).
    """
    ids: list[str] = []
    for offset, line in enumerate(lines):
        seq = first_seq + offset
        problem = None
        try:
            raw = json.loads(unseal(line))
        except EventDecodeError as exc:  # the checksum does not match
            raw, problem = None, str(exc).partition(": ")[2]
        except (ValueError, RecursionError):
            raw, problem = None, "not JSON"
        if problem is None and not isinstance(raw, dict):
            problem = "not a JSON object"
        if problem is None:
            assert isinstance(raw, dict)
            if stream is None and isinstance(raw.get("stream"), str):
                stream = raw["stream"]
            if raw.get("stream") != stream or raw.get("seq") != seq:
                problem = (
                    f"holds stream {raw.get('stream')!r} seq {raw.get('seq')!r} "
                    f"where seq {seq} belongs"
                )
            elif not isinstance(raw.get("id"), str):
                problem = "the event has no id"
        if problem is not None:
            return ids, stream, CorruptLogError(where, stream, problem, line=seq + 1, seq=seq)
        ids.append(raw["id"])
    return ids, stream, None


def _warn_torn(path: Path, line: int, dropped: int, *, cut: bool) -> None:
    action = "cut it" if cut else "ignoring it (a read never changes the file)"
    message = (
        f"{path}: line {line} was torn by a crash during an append "
        f"({dropped} bytes, never acknowledged); {action}"
    )
    logger.warning("%s", message)
    warnings.warn(message, TornLineWarning, stacklevel=3)


def _read_locked(path: Path, offset: int = 0) -> tuple[bytes, os.stat_result] | None:
    """The file's bytes from `offset` under a shared lock, and its stat; None when missing."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; the lock lives with the handle
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise StoreError(f"{path} is a directory, not a stream's file") from None
    with f:
        if fcntl is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(f, fcntl.LOCK_SH)
        st = os.fstat(f.fileno())
        if offset:
            f.seek(offset)
        return f.read(), st


def read_jsonl_file(path: str | os.PathLike[str], *, strict: bool = False) -> list[Event]:
    """Every event of one JSONL stream file; needs nothing but the file (post-mortems).

    Checksums are verified (`strict`: every line must carry one). A torn last fragment is
    ignored with a `TornLineWarning` (the file is never modified); anything else wrong
    raises `CorruptLogError` naming the file, line and seq.
    """
    path = Path(path)
    loaded = _read_locked(path)
    if loaded is None:
        raise FileNotFoundError(path)
    lines, tail = _split(loaded[0])
    events = _decode_lines(lines, 0, str(path), None, strict or strict_mode())
    _check_tail(path, tail, events[0].stream if events else None, len(lines))
    return events


def _check_tail(path: Path, tail: bytes, stream: str | None, lines: int) -> None:
    """For a reader: raise when the last fragment is damage; warn when it is torn."""
    error = _tail_error(tail, str(path), stream, lines + 1)
    if error is not None:
        raise error
    if tail:
        _warn_torn(path, lines + 1, len(tail), cut=False)


# -- the store ------------------------------------------------------------------------------


@dataclass
class _FileState:
    """What the writer knows about one stream file (as of its last look)."""

    ino: int = -1
    size: int = 0  # bytes seen, torn tail included
    mtime_ns: int = 0
    offset: int = 0  # end of the last good line
    lines: int = 0  # good lines = the stream's next seq
    stream: str | None = None
    ids: list[str] = field(default_factory=list)
    corrupt: CorruptLogError | None = None  # the first bad line, when there is one


class JsonlStore:
    """An event store of JSONL files in one directory, shared safely by threads and processes."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: bool = True,
        read_only: bool = False,
        strict: bool = False,
    ):
        if fcntl is None:  # pragma: no cover - Windows
            raise StoreError("the JSONL store needs POSIX file locks (fcntl)")
        self.directory = Path(directory).expanduser().absolute()
        self.fsync = fsync
        self.read_only = read_only
        self.strict = strict
        self._mutex = threading.Lock()
        self._files: dict[str, _FileState] = {}
        self._ids: dict[str, str] = {}  # event id -> file name
        if not read_only:
            make_private_dirs(self.directory)
        elif not self.directory.exists():
            raise StoreNotFound(str(self.directory), "JSONL store")
        elif not self.directory.is_dir():
            raise StoreError(f"{self.directory} is not a directory: a JSONL store is one")

    def __repr__(self) -> str:
        mode = ", read_only=True" if self.read_only else ""
        return f"JsonlStore({str(self.directory)!r}, fsync={self.fsync}{mode})"

    @property
    def url(self) -> str:
        """The store's URL (see `flashfsm.adapters.stores`)."""
        return path_url("jsonl", self.directory)

    def path_for(self, stream: str) -> Path:
        """The file that holds `stream`."""
        return self.directory / stream_file_name(stream)

    # -- writing -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _writer_lock(self) -> Iterator[None]:
        """The in-process mutex, then the directory's exclusive lock (every writer's turn)."""
        with self._mutex:
            lock_path = self.directory / LOCK_NAME
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the lock

    def _refresh(self) -> None:
        """Bring the per-file index up to date (call under the writer lock)."""
        present: set[str] = set()
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if not entry.name.endswith(SUFFIX) or not entry.is_file():
                    continue
                present.add(entry.name)
                st = entry.stat()
                state = self._files.get(entry.name)
                if (
                    state is not None
                    and state.ino == st.st_ino
                    and state.size == st.st_size
                    and state.mtime_ns == st.st_mtime_ns
                ):
                    continue
                self._scan(entry.name, state, st)
        for name in set(self._files) - present:
            self._forget(name)

    def _forget(self, name: str) -> None:
        state = self._files.pop(name, None)
        if state is not None:
            for event_id in state.ids:
                if self._ids.get(event_id) == name:
                    del self._ids[event_id]

    def _scan(self, name: str, state: _FileState | None, st: os.stat_result) -> None:
        """Index the file's new lines (all of them when it was replaced or rewritten)."""
        grown = state is not None and state.ino == st.st_ino and st.st_size > state.size
        if not grown:
            self._forget(name)
            state = _FileState(stream=_stream_of_name(name))
        assert state is not None
        path = self.directory / name
        loaded = _read_locked(path, state.offset)
        if loaded is None:
            self._forget(name)
            return
        data, st = loaded
        good, tail = _split(data)
        ids, stream, state.corrupt = _envelopes(good, state.lines, str(path), state.stream)
        if state.corrupt is None:
            state.corrupt = _tail_error(tail, str(path), stream, state.lines + len(good) + 1)
        if state.corrupt is not None:
            # Only this stream's appends are refused; the other streams carry on.
            logger.warning("%s; appends to this stream are refused", state.corrupt)
            good = good[: len(ids)]
        for event_id in ids:
            self._ids.setdefault(event_id, name)
        state.ids.extend(ids)
        state.stream = stream
        state.ino, state.size, state.mtime_ns = st.st_ino, st.st_size, st.st_mtime_ns
        state.offset += sum(len(line) + 1 for line in good)
        state.lines += len(good)
        self._files[name] = state

    def append(self, stream: str, events: Sequence[Event], expected_seq: int) -> None:
        """Append a batch with one write, under the writer locks (see `EventStore.append`)."""
        if self.read_only:
            raise StoreError(f"{self!r} was opened read-only")
        if not events:
            return
        data = b"".join([sealed(row) + b"\n" for row in encode_rows(stream, events)])
        name = stream_file_name(stream)
        path = self.directory / name
        with self._writer_lock():
            self._refresh()
            state = self._files.get(name) or _FileState(stream=stream)
            if state.corrupt is not None:
                raise state.corrupt
            check_batch(stream, events, expected_seq, state.lines)
            for event in events:
                if event.id in self._ids:
                    raise DuplicateEventError(stream, event.id)
            try:
                st = self._append_locked(path, state, data)
            except OSError as exc:
                if exc.errno in _FULL:
                    raise StoreFullError(str(path), stream) from None
                raise
            state.ino, state.size, state.mtime_ns = st.st_ino, st.st_size, st.st_mtime_ns
            state.offset += len(data)
            state.lines += len(events)
            state.stream = stream
            ids = [event.id for event in events]
            state.ids.extend(ids)
            self._ids.update(dict.fromkeys(ids, name))
            self._files[name] = state

    def _append_locked(self, path: Path, state: _FileState, data: bytes) -> os.stat_result:
        """Write a batch at the end of `path` (under the writer locks); its new stat.

        The one place a torn fragment is cut: after the last good line, only when the index
        (`_scan`) found no damage. On any error (a full disk) the file is cut back to its
        last good line and the error raised: nothing of the batch stays.
        """
        created = create_private_file(path)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            if not created and (st.st_ino, st.st_size) != (state.ino, state.size):
                raise StoreError(
                    f"{path} changed while this writer held the store's lock; "
                    "is something else writing to it?"
                )
            if st.st_size > state.offset:  # a torn append a crash left: cut it first
                os.ftruncate(fd, state.offset)
                _warn_torn(path, state.lines + 1, st.st_size - state.offset, cut=True)
            try:
                self._write(fd, data)
                if self.fsync:
                    fsync_fd(fd)
                    if created:
                        fsync_dir(self.directory)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, state.offset)
                raise
            return os.fstat(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _write(fd: int, data: bytes) -> None:
        """Write all of `data` (a short write is continued)."""
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    # -- reading -----------------------------------------------------------------------

    def read(self, stream: str, after: int | None = None) -> list[Event]:
        """The stream's events with seq > `after` (all when None), in seq order."""
        path = self.path_for(stream)
        loaded = _read_locked(path)
        if loaded is None:
            return []
        good, tail = _split(loaded[0])
        start = 0 if after is None else max(0, after + 1)
        events = _decode_lines(good[start:], start, str(path), stream, self._strict())
        _check_tail(path, tail, stream, len(good))
        return events

    def _strict(self) -> bool:
        return self.strict or strict_mode()

    def iter_read(self, stream: str, after: int | None = None) -> Iterator[Event]:
        """`read`, decoded lazily `CHUNK` lines at a time (what a replay wants).

        The file is read at once under its lock, as `read` does; only the decoding is lazy.
        """
        path = self.path_for(stream)
        loaded = _read_locked(path)
        if loaded is None:
            return
        data, st = loaded
        good, tail = _split(data)
        del data
        start = 0 if after is None else max(0, after + 1)
        strict = self._strict()
        ids: list[str] = []
        for first in range(start, len(good), CHUNK):
            events = _decode_lines(good[first : first + CHUNK], first, str(path), stream, strict)
            if start == 0:
                ids.extend(map(_ID, events))
            yield from events
        _check_tail(path, tail, stream, len(good))
        if start == 0 and not tail:
            self._prime(path.name, stream, st, good, ids)

    def _prime(
        self, name: str, stream: str, st: os.stat_result, good: list[bytes], ids: list[str]
    ) -> None:
        """Index a file that a whole read just decoded, as `_scan` would have.

        A reattach reads the whole stream and then appends its claim: without this the
        append's `_refresh` would parse every line of the file a second time. The bytes and
        the stat were taken under the file's shared lock, so they agree, and `_refresh`
        still re-scans the file if it changed since.
        """
        with self._mutex:
            known = self._files.get(name)
            if known is not None and (known.ino, known.size, known.mtime_ns) == (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
            ):
                return
            self._forget(name)
            state = _FileState(
                ino=st.st_ino,
                size=st.st_size,
                mtime_ns=st.st_mtime_ns,
                offset=sum(map(len, good)) + len(good),
                lines=len(good),
                stream=stream,
                ids=ids,
            )
            for event_id in ids:
                self._ids.setdefault(event_id, name)
            self._files[name] = state

    def streams(self) -> list[str]:
        """Every stream with at least one event, sorted."""
        names: list[str] = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if not entry.name.endswith(SUFFIX) or not entry.is_file():
                    continue
                if entry.stat().st_size == 0:
                    continue
                stream = _stream_of_name(entry.name)
                if stream is None:
                    stream = self._first_stream(Path(entry.path))
                if stream is not None:
                    names.append(stream)
        return sorted(names)

    @staticmethod
    def _first_stream(path: Path) -> str | None:
        with open(path, "rb") as f:
            first = f.readline()
        try:
            raw = json.loads(first)
        except ValueError:
            return None
        stream = raw.get("stream") if isinstance(raw, dict) else None
        return stream if isinstance(stream, str) else None

    def follow(
        self, stream: str, after: int | None = None, *, poll_s: float = 0.2
    ) -> Iterator[Event]:
        """Yield events after `after`, then poll the file every `poll_s` for new lines.

        Only the bytes appended since the last poll are read and decoded.
        """
        path = self.path_for(stream)
        last = -1 if after is None else after
        offset = lines_seen = 0
        while True:
            loaded = _read_locked(path, offset)
            if loaded is not None and loaded[1].st_size < offset:  # replaced: start over
                offset = lines_seen = 0
                continue
            batch: list[Event] = []
            if loaded is not None:
                good, tail = _split(loaded[0])
                skip = min(len(good), max(0, last + 1 - lines_seen))  # already seen or before
                batch = _decode_lines(
                    good[skip:], lines_seen + skip, str(path), stream, self._strict()
                )
                error = _tail_error(tail, str(path), stream, lines_seen + len(good) + 1)
                if error is not None:
                    raise error
                offset += sum(len(line) + 1 for line in good)
                lines_seen += len(good)
            fresh = [event for event in batch if event.seq > last]
            if fresh:
                for event in fresh:
                    last = event.seq
                    yield event
            else:
                time.sleep(poll_s)

    def close(self) -> None:
        """Nothing is held open between calls; drop the index."""
        with self._mutex:
            self._files.clear()
            self._ids.clear()

    def __enter__(self) -> JsonlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
