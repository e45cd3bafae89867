"""A stand-in for the Hugging Face Hub, for tests: the HTTP endpoints the real huggingface_hub client
calls to check a token, create a repo, commit files and download them, with repos kept in memory.

Files are always committed as regular (base64) files, never LFS or Xet, which the preupload answer
decides. A name is taken across repo types here (a dataset ``alice/x`` makes creating the model
``alice/x`` answer 409), which is the conflict rlcli must report. Every request is recorded in
``requests`` as (method, path).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}


def git_blob_sha(data: bytes) -> str:
    """The git object id of a file's content: what the Hub reports as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    oid: str
    summary: str
    files: dict[str, bytes]  # the whole tree after this commit
    added: list[str]  # paths this commit wrote


@dataclass
class Repo:
    repo_id: str
    repo_type: str
    private: bool = False
    commits: list[Commit] = field(default_factory=list)

    def resolve(self, revision: str) -> Commit | None:
        if revision == "main":
            return self.commits[-1]
        return next((c for c in self.commits if c.oid == revision), None)


class FakeHub:
    """``with FakeHub(token, user) as hub:`` serves at ``hub.url`` until the block ends."""

    def __init__(self, token: str = "hf_test_token", user: str = "alice") -> None:
        self.token = token
        self.user = user
        self.repos: dict[str, Repo] = {}  # by repo id, whatever its type
        self.requests: list[tuple[str, str]] = []
        self.created: list[dict[str, Any]] = []  # bodies of repo creations
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_repo(self, repo_id: str, repo_type: str = "model", files: dict[str, bytes] | None = None) -> Repo:
        """A repo as if created and committed to earlier (``files`` in its first commit)."""
        repo = Repo(repo_id, repo_type)
        repo.commits.append(Commit(_new_oid(repo_id, 0), "initial commit", {".gitattributes": b""}, []))
        if files:
            repo.commits.append(Commit(_new_oid(repo_id, 1), "files", {**repo.commits[-1].files, **files},
                                       list(files)))
        self.repos[repo_id] = repo
        return repo

    def commits(self, repo_id: str) -> list[Commit]:
        """The commits made through the API (the repo's creation not counted)."""
        return self.repos[repo_id].commits[1:]

    def count(self, method: str, path_part: str) -> int:
        return sum(1 for m, p in self.requests if m == method and path_part in p)


def _new_oid(repo_id: str, index: int) -> str:
    return hashlib.sha1(f"{repo_id}@{index}".encode()).hexdigest()


def _handler_for(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the base class's name)
            pass

        # -- plumbing --------------------------------------------------------------------------
        def _reply(self, status: int, body: bytes | dict | list = b"", headers: dict[str, str] | None = None,
                   *, head: bool = False, length: int | None = None) -> None:
            data = json.dumps(body).encode() if isinstance(body, dict | list) else body
            self.send_response(status)
            if isinstance(body, dict | list):
                self.send_header("Content-Type", "application/json")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(length if length is not None else len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

        def _error(self, status: int, message: str, code: str | None = None, **headers: str) -> None:
            extra = {"X-Error-Message": message, **headers}
            if code:
                extra["X-Error-Code"] = code
            self._reply(status, {"error": message}, extra, head=self.command == "HEAD")

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _auth(self) -> bool | None:
            """True: our token; None: no token; False: a wrong one (answered 401 here)."""
            header = self.headers.get("Authorization")
            if header is None:
                return None
            if header == f"Bearer {hub.token}":
                return True
            self._error(401, "Invalid credentials in Authorization header")
            return False

        def _dispatch(self) -> None:
            url = urlsplit(self.path)
            with hub.lock:
                hub.requests.append((self.command, url.path))
            auth = self._auth()
            if auth is False:
                return
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            query = parse_qs(url.query)
            with hub.lock:
                self._route(parts, query, auth is True)

        do_GET = do_POST = do_HEAD = _dispatch

        # -- endpoints ---------------------------------------------------------------------------
        def _route(self, parts: list[str], query: dict[str, list[str]], authed: bool) -> None:
            method = self.command
            if parts == ["api", "whoami-v2"] and method == "GET":
                if not authed:
                    return self._error(401, "Invalid credentials in Authorization header")
                return self._reply(200, {"type": "user", "name": hub.user, "auth": {"type": "access_token"}})
            if parts == ["api", "validate-yaml"] and method == "POST":
                return self._validate_yaml()
            if parts == ["api", "repos", "create"] and method == "POST":
                return self._create(authed)
            if len(parts) >= 4 and parts[0] == "api" and parts[1] in TYPES:
                repo_type, repo_id, rest = TYPES[parts[1]], "/".join(parts[2:4]), parts[4:]
                return self._repo_api(repo_type, repo_id, rest, authed)
            repo_type = "model"
            if parts and parts[0] in TYPES and parts[0] != "models":
                repo_type, parts = TYPES[parts[0]], parts[1:]
            if len(parts) >= 5 and parts[2] == "resolve" and method in ("GET", "HEAD"):
                return self._resolve(repo_type, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), authed)
            return self._error(404, f"no route for {method} {self.path}")

        def _validate_yaml(self) -> None:
            content = json.loads(self._body())["content"]
            if content.startswith("---\n"):
                try:
                    meta = yaml.safe_load(content[4:].split("\n---\n", 1)[0])
                except yaml.YAMLError as e:
                    return self._reply(400, {"errors": [{"message": str(e)}]})
                if not isinstance(meta, dict):
                    return self._reply(400, {"errors": [{"message": "metadata must be a mapping"}]})
            return self._reply(200, {"errors": [], "warnings": []})

        def _create(self, authed: bool) -> None:
            if not authed:
                return self._error(401, "You must be authenticated to create a repo")
            body = json.loads(self._body())
            hub.created.append(body)
            namespace = body.get("organization") or hub.user
            if namespace != hub.user:
                return self._error(403, f"You don't have the rights to create a repo under '{namespace}'")
            repo_id, repo_type = f"{namespace}/{body['name']}", body.get("type") or "model"
            url = f"{hub.url}/{URL_PREFIX[repo_type]}{repo_id}"
            if repo_id in hub.repos:
                existing = hub.repos[repo_id].repo_type
                return self._reply(409, {"error": f"You already created this {existing} repo", "url": url},
                                   {"X-Error-Message": f"You already created this {existing} repo"})
            hub.add_repo(repo_id, repo_type).private = body.get("visibility") == "private"
            return self._reply(200, {"url": url, "name": repo_id})

        def _find(self, repo_type: str, repo_id: str, authed: bool) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None or repo.repo_type != repo_type or (repo.private and not authed):
                self._error(404, "Repository not found", "RepoNotFound")
                return None
            return repo

        def _repo_api(self, repo_type: str, repo_id: str, rest: list[str], authed: bool) -> None:
            repo = self._find(repo_type, repo_id, authed)
            if repo is None:
                return
            revision = rest[1] if len(rest) >= 2 else "main"
            if rest[:1] in ([], ["revision"]) and self.command == "GET":
                commit = repo.resolve(revision)
                if commit is None:
                    return self._error(404, "Invalid rev id", "RevisionNotFound")
                return self._reply(200, {"id": repo_id, "sha": commit.oid, "private": repo.private,
                                         "siblings": [{"rfilename": p} for p in sorted(commit.files)]})
            if rest[:1] == ["tree"] and self.command == "GET":
                commit = repo.resolve(revision)
                if commit is None:
                    return self._error(404, "Invalid rev id", "RevisionNotFound")
                return self._reply(200, _tree(commit.files))
            if not authed:
                return self._error(401, "You must be authenticated to write to a repo")
            if rest[:1] == ["preupload"] and self.command == "POST":
                files = json.loads(self._body())["files"]
                return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                                    "oid": None} for f in files]})
            if rest[:1] == ["commit"] and self.command == "POST":
                return self._commit(repo, revision)
            return self._error(404, f"no route for {self.command} {self.path}")

        def _commit(self, repo: Repo, revision: str) -> None:
            if revision != "main":
                return self._error(400, "commits go to main here")
            summary, files, added = "", dict(repo.commits[-1].files), []
            for line in self._body().splitlines():
                item = json.loads(line)
                if item["key"] == "header":
                    summary = item["value"]["summary"]
                elif item["key"] == "file" and item["value"].get("encoding") == "base64":
                    files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    added.append(item["value"]["path"])
                else:
                    return self._error(400, f"unsupported commit operation {item['key']}")
            commit = Commit(_new_oid(repo.repo_id, len(repo.commits)), summary, files, added)
            repo.commits.append(commit)
            return self._reply(200, {"success": True, "commitOid": commit.oid, "pullRequestUrl": None,
                                     "commitUrl": f"{hub.url}/{URL_PREFIX[repo.repo_type]}{repo.repo_id}"
                                                  f"/commit/{commit.oid}"})

        def _resolve(self, repo_type: str, repo_id: str, revision: str, path: str, authed: bool) -> None:
            repo = self._find(repo_type, repo_id, authed)
            if repo is None:
                return
            commit = repo.resolve(revision)
            if commit is None:
                return self._error(404, "Invalid rev id", "RevisionNotFound")
            if path not in commit.files:
                return self._error(404, "Entry not found", "EntryNotFound", **{"X-Repo-Commit": commit.oid})
            data = commit.files[path]
            headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{git_blob_sha(data)}"',
                       "Content-Type": "application/octet-stream"}
            self._reply(200, data, headers, head=self.command == "HEAD")

    return Handler


def _tree(files: dict[str, bytes]) -> list[dict[str, Any]]:
    folders = sorted({"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)})
    entries: list[dict[str, Any]] = [{"type": "directory", "path": d, "oid": git_blob_sha(d.encode()), "size": 0}
                                     for d in folders]
    entries += [{"type": "file", "path": p, "size": len(data), "oid": git_blob_sha(data)}
                for p, data in sorted(files.items())]
    return entries
