"""A small Hugging Face Hub on 127.0.0.1 for tests: real HTTP, byte ranges, the Hub's errors.

It answers the two endpoints servepilot's remote reading uses through huggingface_hub:
`GET /api/models/{repo}/revision/{rev}` (repository info with file sizes) and
`GET|HEAD /{repo}/resolve/{rev}/{file}` (a file, or a `Range: bytes=a-b` of it, as 206 with
Content-Range). Errors carry the `X-Error-Code` header that huggingface_hub's
hf_raise_for_status reads (GatedRepo, RepoNotFound, RevisionNotFound, EntryNotFound).
Every request is recorded, so tests count what a call cost.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    commit: str = "c0ffee" + "0" * 34
    gated: bool = False  # files need a token (info stays public, as on the Hub)
    private: bool = False  # everything needs a token
    token: str = "hf_test_token"
    branches: tuple[str, ...] = ("main",)


@dataclass
class Request:
    method: str
    path: str
    range: str | None


@dataclass
class Behaviour:
    """Misbehaviours a test switches on."""

    rate_limited: bool = False  # 429 on every file
    drop_on: str | None = None  # close the connection without an answer for files with this suffix
    stall_on: str | None = None  # wait (until released) before answering files with this suffix
    release: threading.Event = field(default_factory=threading.Event)


class FakeHub:
    def __init__(self):
        self.repos: dict[str, FakeRepo] = {}
        self.requests: list[Request] = []
        self.behaviour = Behaviour()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.behaviour.release.set()
        self._server.shutdown()
        self._server.server_close()

    def add(self, repo_id: str, repo: FakeRepo) -> FakeRepo:
        self.repos[repo_id] = repo
        return repo

    def model_requests(self) -> list[Request]:
        """Requests about models (info and files). huggingface_hub >= 2 also fetches its AI-agent
        registry (/api/agent-harnesses) at most once a day on its own: not a model read."""
        with self._lock:
            return [r for r in self.requests if r.path.startswith("/api/models/") or "/resolve/" in r.path]

    def file_requests(self, suffix: str = "") -> list[Request]:
        with self._lock:
            return [r for r in self.requests if "/resolve/" in r.path and r.path.endswith(suffix)]

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()

    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def _handler_class(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_HEAD(self):
                self._answer(head=True)

            def do_GET(self):
                self._answer(head=False)

            def _answer(self, head: bool):
                path = unquote(urlsplit(self.path).path)
                hub._record(Request(self.command, path, self.headers.get("Range")))
                m = re.match(r"^/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/]+)$", path)
                if m:
                    return self._info(m["repo"], m["rev"])
                m = re.match(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$", path)
                if m:
                    return self._file(m["repo"], m["rev"], m["file"], head)
                self._error(404, "RepoNotFound", "no such endpoint")

            def _authorized(self, repo: FakeRepo) -> bool:
                return self.headers.get("Authorization") == f"Bearer {repo.token}"

            def _repo(self, repo_id: str, rev: str) -> FakeRepo | None:
                repo = hub.repos.get(repo_id)
                if repo is None or (repo.private and not self._authorized(repo)):
                    self._error(401, "RepoNotFound", "Repository not found")
                    return None
                if rev not in repo.branches and rev != repo.commit:
                    self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                    return None
                return repo

            def _info(self, repo_id: str, rev: str):
                repo = self._repo(repo_id, rev)
                if repo is None:
                    return
                siblings = [{"rfilename": n, "size": len(d)} for n, d in sorted(repo.files.items())]
                body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": repo.private,
                                   "gated": "manual" if repo.gated else False, "siblings": siblings}).encode()
                self._send(200, body, {"Content-Type": "application/json"})

            def _file(self, repo_id: str, rev: str, name: str, head: bool):
                repo = self._repo(repo_id, rev)
                if repo is None:
                    return
                if repo.gated and not self._authorized(repo):
                    return self._error(401, "GatedRepo", "Access to this model is restricted")
                if name not in repo.files:
                    return self._error(404, "EntryNotFound", f"{name} does not exist")
                b = hub.behaviour
                if b.rate_limited:
                    return self._send(429, b"rate limited", {"Retry-After": "7"})
                if b.drop_on and name.endswith(b.drop_on):
                    self.close_connection = True
                    self.connection.close()
                    return
                if b.stall_on and name.endswith(b.stall_on):
                    b.release.wait(30)
                data = repo.files[name]
                headers = {"ETag": f'"{hash(data) & 0xffffffff:x}"', "X-Repo-Commit": repo.commit,
                           "Accept-Ranges": "bytes"}
                rng = self.headers.get("Range")
                m = re.match(r"^bytes=(\d+)-(\d*)$", rng or "")
                if m:
                    start = int(m[1])
                    end = min(int(m[2]) if m[2] else len(data) - 1, len(data) - 1)
                    if start >= len(data):
                        return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                    headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                    return self._send(206, data[start : end + 1], headers, head)
                self._send(200, data, headers, head)

            def _error(self, status: int, code: str, message: str):
                self._send(status, json.dumps({"error": message}).encode(),
                           {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"})

            def _send(self, status: int, body: bytes, headers: dict, head: bool = False):
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if not head:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        return Handler
