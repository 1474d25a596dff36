"""A fake Hugging Face Hub: repos of files that `hf_hub_download` can fetch.

`huggingface_hub` resolves a file with `HEAD {HF_ENDPOINT}/{datasets/}{repo}/resolve/
{revision}/{path}` and needs `X-Repo-Commit` (the commit), `ETag` (the blob id; the cache
names blobs by it) and `Content-Length`; a missing file is a 404 with `X-Error-Code:
EntryNotFound` (a missing repo: `RepoNotFound`, a missing branch: `RevisionNotFound`).
Then it GETs the same URL for the bytes. Every `put` makes a new commit of its repo.

Commit ids are unique across stores, as the Hub's are: the local cache files a download
under its commit, and `huggingface_hub` serves a file it already holds for that commit
even with `force_download=True`, so two simulators (one per test, say) that both made
commit "n" of a repo would otherwise hand a shared cache one's file for the other's.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from dataclasses import dataclass, field

REPO_TYPES = ("model", "dataset", "space")


@dataclass
class HubFile:
    """One stored file."""

    data: bytes
    etag: str  # the git blob sha1, as the Hub reports for non-LFS files
    commit: str


@dataclass
class HubRepo:
    """A repo: its files, and its commits (newest last)."""

    files: dict[str, HubFile] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)

    @property
    def head(self) -> str:
        """The current commit of `main`."""
        return self.commits[-1] if self.commits else "0" * 40


def blob_sha1(data: bytes) -> str:
    """Git's id of a blob."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


class HubStore:
    """Thread-safe in-memory repos keyed by (repo_type, repo_id)."""

    def __init__(self) -> None:
        self._repos: dict[tuple[str, str], HubRepo] = {}
        self._lock = threading.Lock()
        self._counter = 0
        self._salt = uuid.uuid4().hex  # makes commit ids unique across stores

    def put(self, repo: str, path: str, content: str | bytes, *, repo_type: str = "dataset") -> str:
        """Write a file (creating the repo) and return the new commit id."""
        data = content.encode() if isinstance(content, str) else bytes(content)
        key = (_check_type(repo_type), repo)
        with self._lock:
            self._counter += 1
            commit = hashlib.sha1(f"{self._salt}:{repo}:{self._counter}".encode()).hexdigest()
            r = self._repos.setdefault(key, HubRepo())
            r.commits.append(commit)
            r.files[path.strip("/")] = HubFile(data, blob_sha1(data), commit)
            return commit

    def create_repo(self, repo: str, *, repo_type: str = "dataset") -> None:
        """Make an empty repo (so reads of missing files say EntryNotFound)."""
        with self._lock:
            self._repos.setdefault((_check_type(repo_type), repo), HubRepo())

    def delete(self, repo: str, path: str, *, repo_type: str = "dataset") -> bool:
        """Remove a file; True when it existed."""
        with self._lock:
            r = self._repos.get((_check_type(repo_type), repo))
            return bool(r and r.files.pop(path.strip("/"), None))

    def get(self, repo: str, path: str, *, repo_type: str = "dataset") -> bytes | None:
        """A file's bytes, or None."""
        with self._lock:
            r = self._repos.get((_check_type(repo_type), repo))
            f = r.files.get(path.strip("/")) if r else None
            return f.data if f else None

    def text(self, repo: str, path: str, *, repo_type: str = "dataset") -> str | None:
        """A file's text, or None."""
        data = self.get(repo, path, repo_type=repo_type)
        return None if data is None else data.decode("utf-8", "replace")

    def files(self, repo: str, *, repo_type: str = "dataset") -> list[str]:
        """The paths in a repo, sorted."""
        with self._lock:
            r = self._repos.get((_check_type(repo_type), repo))
            return sorted(r.files) if r else []

    def resolve(
        self, repo_type: str, repo: str, revision: str, path: str
    ) -> tuple[int, dict[str, str], bytes]:
        """The HTTP answer (status, headers, body) of a `/resolve/` request."""
        with self._lock:
            r = self._repos.get((repo_type, repo))
            if r is None:
                return _hub_error(404, "RepoNotFound", f"Repository {repo} not found", None)
            if revision != "main" and revision not in r.commits:
                return _hub_error(404, "RevisionNotFound", f"Invalid rev id: {revision}", None)
            f = r.files.get(path.strip("/"))
            if f is None:
                return _hub_error(
                    404, "EntryNotFound", f"{path} does not exist on {revision}", r.head
                )
            headers = {
                "X-Repo-Commit": r.head,
                "ETag": f'"{f.etag}"',
                "Content-Type": "application/octet-stream",
                "Accept-Ranges": "bytes",
                "Content-Disposition": f'inline; filename="{path.rsplit("/", 1)[-1]}"',
            }
            return 200, headers, f.data


def _hub_error(
    status: int, code: str, message: str, commit: str | None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
    if commit:
        headers["X-Repo-Commit"] = commit
    return status, headers, json.dumps({"error": message}).encode()


def _check_type(repo_type: str) -> str:
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, got {repo_type!r}")
    return repo_type
