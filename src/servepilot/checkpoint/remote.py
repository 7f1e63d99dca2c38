"""A Hub model that is not downloaded, read from its small files and headers only.

`remote_view` builds a local stand-in of the checkpoint that the ordinary readers
(checkpoint/inspect.py) take as they are: the small files (config.json, quantization
configs, tokenizer config and chat template, the safetensors index, custom code) copied in
whole, and each weight file as a *sparse* file of its real size that holds only its header
(safetensors: the 8-byte length and the JSON; GGUF: everything up to the end of the
tensor-info table). Nothing past a header is ever requested; the holes read as zeros and
take no disk.

The view lives under `settings.remote_cache_dir()/models--ORG--NAME/COMMIT/`, with a
marker file saying where it came from; a finished view is never fetched again, and a branch
or tag name stays pinned to its commit for `settings.hub_ref_ttl_seconds()`, so a repeated
call makes no request at all.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from servepilot.errors import BadInput

MARKER = ".servepilot-remote.json"
INDEX_NAME = "model.safetensors.index.json"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# Small files worth copying whole: what the readers and the checks look at. tokenizer.json,
# vocab.json and merges.txt are megabytes that nothing here reads.
SMALL_SUFFIXES = (".json", ".py", ".jinja")
SKIP_NAMES = frozenset({"tokenizer.json", "vocab.json"})
SMALL_LIMIT = 4 * 2**20  # a JSON config over 4 MiB is not a config (the index has no limit)
# GGUF metadata is read in growing prefixes: 2 MiB covers a model without a big vocabulary;
# a 256k-token vocabulary with merges needs ~10 MiB. Past 512 MiB the file is not sane.
GGUF_FIRST = 2 * 2**20
GGUF_LIMIT = 512 * 2**20
# Parallel header reads: the Hub answers each in ~100-300 ms; 8 at a time reads a
# 119-shard checkpoint in a few seconds without hammering it.
WORKERS = 8


class OfflineAndUnread(BadInput):
    """HF_HUB_OFFLINE is set and the model's headers were never read."""


@dataclass(frozen=True)
class RemoteView:
    """Where a Hub model's header-only view lives and how it was obtained."""

    repo_id: str
    revision: str
    commit: str
    endpoint: str
    path: Path
    requests: int  # HTTP requests this call made (0 when the view came from the cache)
    problems: tuple[str, ...] = ()

    @property
    def download_command(self) -> str:
        return download_command(self.repo_id, self.commit)

    def to_json(self) -> dict:
        return {"repo_id": self.repo_id, "revision": self.revision, "commit": self.commit,
                "endpoint": self.endpoint, "requests": self.requests, "headers_only": True,
                "download": self.download_command}


def download_command(repo_id: str, commit: str | None = None) -> str:
    rev = f" --revision {commit}" if commit else ""
    return f"hf download {repo_id}{rev}"


# The views this process obtained, by path, with the requests each cost: `inspect --json`
# and `deployment` report them; a view from an earlier process cost nothing now.
_THIS_PROCESS: dict[str, RemoteView] = {}


def view_of(path: str | os.PathLike | None) -> RemoteView | None:
    """The RemoteView a path (the view directory or a file in it) belongs to, else None."""
    if not path:
        return None
    p = Path(path)
    if str(p) in _THIS_PROCESS:
        return _THIS_PROCESS[str(p)]
    for d in (p, *p.parents[:2]):
        if (d / MARKER).is_file():
            return _read_marker(d)
    return None


def _read_marker(d: Path) -> RemoteView | None:
    try:
        data = json.loads((d / MARKER).read_text(encoding="utf-8"))
        return RemoteView(data["repo_id"], data["revision"], data["commit"], data["endpoint"], d, 0,
                          tuple(data.get("problems", ())))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def without_weights(snapshot: Path) -> bool:
    """A Hugging Face cache snapshot that holds config files but no weight file at all (what
    AutoConfig or a failed engine start leaves behind): its headers are read from the Hub,
    unless HF_HUB_OFFLINE is set."""
    from servepilot.settings import hf_offline

    if hf_offline() or not (snapshot / "config.json").is_file():
        return False
    return not any(snapshot.glob("*.safetensors")) and not any(snapshot.glob("*.gguf")) and not any(
        snapshot.glob("*.bin"))


def inspect_remote(repo_id: str, revision: str | None = None, not_cached: BadInput | None = None,
                   gguf_tag: str | None = None):
    """ModelSpec of a Hub model from its headers; BadInput (one line) when the Hub cannot say.
    Offline, a model never read before raises `not_cached` (the local cache's own error)."""
    from servepilot.checkpoint.inspect import inspect_path

    try:
        view = remote_view(repo_id, revision, gguf_tag=gguf_tag)
    except OfflineAndUnread:
        if not_cached is not None:
            raise not_cached from None
        raise
    _THIS_PROCESS[str(view.path)] = view
    spec = inspect_path(view.path)
    if view.problems:
        spec = dataclasses.replace(spec, problems=tuple(view.problems) + tuple(spec.problems))
    return spec


def remote_view(repo_id: str, revision: str | None = None, gguf_tag: str | None = None) -> RemoteView:
    """The header-only view of `repo_id` at `revision` (default main), fetched if needed.
    `gguf_tag` picks the GGUF model of a repository that holds several (llama.cpp's
    `-hf REPO:QUANT`): its view is kept apart from the repository's other models."""
    from servepilot import settings

    revision = revision or "main"
    endpoint = settings.hf_endpoint()
    repo_dir = settings.remote_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    # Offline, a pinned branch is used however old: there is no way to ask.
    ttl = None if settings.hf_offline() else settings.hub_ref_ttl_seconds()
    commit = revision if COMMIT_RE.match(revision) else _pinned_commit(repo_dir, revision, ttl)
    if commit:
        cached = _finished_view(repo_dir / _view_name(commit, gguf_tag), endpoint)
        if cached is not None:
            return dataclasses.replace(cached, revision=revision)
    if settings.hf_offline():
        raise OfflineAndUnread(f"{repo_id} is neither in the Hugging Face cache nor read before, and HF_HUB_OFFLINE is "
                               "set",
                       hint=f"unset HF_HUB_OFFLINE to read its headers, or: {download_command(repo_id)}")
    from servepilot.checkpoint.hub_http import HubClient

    client = HubClient(repo_id, endpoint, settings.hf_timeout_seconds())
    listing = client.listing(revision)
    _pin(repo_dir, revision, listing.commit)
    cached = _finished_view(repo_dir / _view_name(listing.commit, gguf_tag), endpoint)
    if cached is not None:
        return dataclasses.replace(cached, revision=revision, requests=client.requests)
    return _fetch_view(client, repo_dir / _view_name(listing.commit, gguf_tag), revision, listing, gguf_tag)


def _view_name(commit: str, gguf_tag: str | None) -> str:
    return commit if not gguf_tag else f"{commit}-{quote(gguf_tag.lower(), safe='')}"


def _ref_file(repo_dir: Path, revision: str) -> Path:
    return repo_dir / "refs" / quote(revision, safe="")


def _pinned_commit(repo_dir: Path, revision: str, ttl: float | None) -> str | None:
    ref = _ref_file(repo_dir, revision)
    try:
        age = time.time() - ref.stat().st_mtime
        commit = ref.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if (ttl is not None and age > ttl) or not COMMIT_RE.match(commit):
        return None
    return commit


def _pin(repo_dir: Path, revision: str, commit: str) -> None:
    if revision == commit:
        return
    ref = _ref_file(repo_dir, revision)
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.with_name(ref.name + f".{os.getpid()}.tmp")
    tmp.write_text(commit, encoding="utf-8")
    os.replace(tmp, ref)


def _finished_view(path: Path, endpoint: str) -> RemoteView | None:
    """A view fetched before from the same Hub with nothing missing."""
    marker = path / MARKER
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not data.get("complete") or data.get("endpoint") != endpoint:
        return None
    return _read_marker(path)


def _fetch_view(client, dest: Path, revision: str, listing, gguf_tag: str | None = None) -> RemoteView:
    """Fetch into a fresh directory, then move it into place (a reader never sees half a view)."""
    import shutil  # here and in _fill: a local check only asks view_of, and these cost ~15 ms
    import threading

    dest.parent.mkdir(parents=True, exist_ok=True)
    work = dest.with_name(f"{dest.name}.partial-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        problems = _fill(client, work, listing, gguf_tag)
        marker = {"repo_id": client.repo_id, "revision": revision, "commit": listing.commit,
                  "endpoint": client.endpoint, "complete": not problems, "problems": problems,
                  "fetched_at": time.time(), "sizes": listing.sizes}
        (work / MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")
        if dest.exists():  # an unfinished view from an earlier call, or a race: replace it
            shutil.rmtree(dest, ignore_errors=True)
        os.replace(work, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return RemoteView(client.repo_id, revision, listing.commit, client.endpoint, dest, client.requests,
                      tuple(problems))


def _fill(client, work: Path, listing, gguf_tag: str | None = None) -> list[str]:
    sizes = listing.sizes
    small = [n for n, s in sizes.items() if _is_small_file(n, s)]
    for name in small:
        data, _ = client.get(name, listing.commit)  # a failure here is fatal: config.json is needed
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    shards = _shards(work, sizes)
    ggufs = [] if shards or "config.json" in sizes else _gguf_files(client.repo_id, sizes, gguf_tag)
    jobs = [(n, _safetensors_header) for n in shards] + [(n, _gguf_header) for n in ggufs]
    problems: list[str] = []
    if not jobs:
        return problems
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(WORKERS, len(jobs))) as pool:
        futures = [(name, pool.submit(read, client, name, listing.commit)) for name, read in jobs]
        results = [(name, _result(f)) for name, f in futures]
    failures = [(n, r) for n, r in results if isinstance(r, BadInput)]
    fatal = [r for _, r in failures if _fatal(r)]
    if fatal or (failures and len(failures) == len(results)):
        raise (fatal or [failures[0][1]])[0]
    for name, got in results:
        if isinstance(got, BadInput):
            problems.append(f"{name}: header not read from {client.endpoint}: {got.problem}")
            continue
        prefix, total = got
        _write_sparse(work / name, prefix, total if total is not None else sizes.get(name))
    return problems


def _result(future):
    try:
        return future.result()
    except BadInput as exc:
        return exc


def _fatal(exc: BadInput) -> bool:
    """Failures that would repeat for every file: access and rate limiting stop the read."""
    return any(w in exc.problem for w in ("HTTP 401", "HTTP 403", "HTTP 429", "gated", "private"))


def _is_small_file(name: str, size) -> bool:
    base = name.rsplit("/", 1)[-1]
    if name == INDEX_NAME:
        return True
    if not name.endswith(SMALL_SUFFIXES) or base in SKIP_NAMES:
        return False
    if "/" in name and not name.endswith(".py"):  # only the top level, plus code modules
        return False
    return size is None or size <= SMALL_LIMIT


def _shards(work: Path, sizes: dict) -> list[str]:
    """The shards the index names (that exist on the Hub), else the top-level .safetensors."""
    index = work / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        except (ValueError, AttributeError):
            weight_map = None
        if isinstance(weight_map, dict):
            named = sorted({str(v) for v in weight_map.values()})
            return [n for n in named if n in sizes]
        return []  # the reader reports the broken index
    return sorted(n for n in sizes if "/" not in n and n.endswith(".safetensors"))


def _gguf_files(repo_id: str, sizes: dict, tag: str | None) -> list[str]:
    """The files of the one GGUF model to read (all parts of a split model); BadInput, before
    any header is fetched, when the repository holds several and `tag` names none of them."""
    from servepilot.checkpoint.gguf_reader import SPLIT_RE

    models: dict[str, list[str]] = {}
    for name in sorted(sizes):
        if "/" in name or not name.lower().endswith(".gguf") or name.lower().startswith("mmproj"):
            continue
        m = SPLIT_RE.match(name)
        models.setdefault(m["stem"] + ".gguf" if m else name, []).append(name)
    if tag:
        models = {k: v for k, v in models.items() if tag.lower() in k.lower()}
        if not models:
            raise BadInput(f"{repo_id} has no GGUF file matching {tag!r}",
                           hint="the tag after ':' is a part of the file name, e.g. Q4_K_M")
    if len(models) > 1:
        names = ", ".join(list(models)[:6]) + (f" (+{len(models) - 6} more)" if len(models) > 6 else "")
        raise BadInput(f"{repo_id} holds {len(models)} GGUF models ({names})",
                       hint=f"name one as {repo_id}:QUANT, as llama.cpp's -hf does (e.g. {repo_id}:Q4_K_M)")
    return [n for files in models.values() for n in files]


def _safetensors_header(client, name: str, commit: str) -> tuple[bytes, int | None]:
    from servepilot.checkpoint.hub_http import FIRST_RANGE

    data, total = client.get(name, commit, (0, FIRST_RANGE - 1))
    if len(data) < 8:
        return data, total
    need = 8 + int.from_bytes(data[:8], "little")
    from servepilot.checkpoint.safetensors import MAX_HEADER_BYTES

    if need > len(data) and need <= 8 + MAX_HEADER_BYTES and (total is None or need <= total):
        rest, _ = client.get(name, commit, (len(data), need - 1))
        data += rest
    return data[:need], total


def _gguf_header(client, name: str, commit: str) -> tuple[bytes, int | None]:
    from servepilot.checkpoint.gguf_extent import NeedMore, NotGGUF, metadata_end

    data, total = client.get(name, commit, (0, GGUF_FIRST - 1))
    while True:
        try:
            return data[: metadata_end(data)], total
        except NotGGUF:
            return data, total  # the GGUF reader names what is wrong
        except NeedMore:
            if (total is not None and len(data) >= total) or len(data) >= GGUF_LIMIT:
                return data, total
            more, _ = client.get(name, commit, (len(data), 2 * len(data) - 1))
            if not more:
                return data, total
            data += more


def _write_sparse(path: Path, prefix: bytes, size: int | None) -> None:
    """The header bytes at the start of a file of the real size; the rest is a hole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(prefix)
        if size is not None and size > len(prefix):
            f.truncate(size)
