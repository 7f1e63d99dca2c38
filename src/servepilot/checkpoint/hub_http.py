"""The Hub over HTTP, through huggingface_hub: repository info, small files, byte ranges.

Every failure becomes a BadInput naming the repository and what to do (STYLE habit 5):
gated or private without a token, a missing revision or file, rate limiting (429), a
dropped or stalled connection. huggingface_hub supplies the URLs (HF_ENDPOINT), the token
(HF_TOKEN or the saved login), the shared HTTP session and the typed status errors.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from servepilot.errors import BadInput

# The first range asked of every safetensors shard. huggingface_hub asks 100,000 bytes
# ("97% of safetensors files have a metadata size < 100kb", hf_api.py
# parse_safetensors_file_metadata); big MoE shards carry bigger ones (a 1T-parameter NVFP4
# checkpoint: 35 MB of header JSON over 119 shards, ~300 kB each, see checkpoint/safetensors.py),
# so 512 KiB reads nearly every real header in one request.
FIRST_RANGE = 512 * 1024


@dataclass(frozen=True)
class RepoListing:
    commit: str
    sizes: dict  # file name -> size in bytes (None when the Hub did not say)
    gated: object = None


class HubClient:
    """One repository on one Hub; counts its requests (tests and the JSON report them)."""

    def __init__(self, repo_id: str, endpoint: str, timeout: float):
        self.repo_id = repo_id
        self.endpoint = endpoint
        self.timeout = timeout
        self.requests = 0
        self._lock = threading.Lock()  # shard headers are read from several threads

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def listing(self, revision: str) -> RepoListing:
        from huggingface_hub import HfApi

        self._count()
        try:
            info = HfApi(endpoint=self.endpoint).model_info(
                self.repo_id, revision=revision, files_metadata=True, timeout=self.timeout)
        except Exception as exc:  # noqa: BLE001 - typed below, one line each
            raise self.error(exc, revision=revision) from None
        if not info.sha:
            raise BadInput(f"{self.endpoint} gave no commit for {self.repo_id}@{revision}")
        sizes = {s.rfilename: s.size for s in (info.siblings or [])}
        return RepoListing(commit=info.sha, sizes=sizes, gated=getattr(info, "gated", None))

    def get(self, name: str, commit: str, byte_range: tuple[int, int] | None = None) -> tuple[bytes, int | None]:
        """(content, total file size from Content-Range) of a file, or of bytes [a, b] of it."""
        from huggingface_hub import get_session, hf_hub_url
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

        url = hf_hub_url(self.repo_id, name, revision=commit, endpoint=self.endpoint)
        headers = build_hf_headers()
        if byte_range is not None:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        self._count()
        try:
            response = get_session().get(url, headers=headers, timeout=self.timeout, follow_redirects=True)
            hf_raise_for_status(response)
            content = response.content
        except Exception as exc:  # noqa: BLE001
            raise self.error(exc, name=name) from None
        total = _content_range_total(response.headers.get("Content-Range"))
        if byte_range is not None and response.status_code == 200:
            # A server that ignores Range sends the whole file: keep only what was asked.
            total = len(content)
            content = content[byte_range[0] : byte_range[1] + 1]
        return content, total

    def error(self, exc: Exception, *, revision: str | None = None, name: str | None = None) -> BadInput:
        """The one line for a failed request."""
        from huggingface_hub import errors

        repo = self.repo_id
        what = f"{repo}/{name}" if name else repo
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(exc, errors.OfflineModeIsEnabled):
            return BadInput(f"{repo} is not cached and HF_HUB_OFFLINE is set", hint=f"unset it, or: hf download {repo}")
        if isinstance(exc, errors.GatedRepoError):
            return BadInput(f"{repo} is a gated repository on {self.endpoint} and this token has no access",
                            hint="accept its terms on the model page, then set HF_TOKEN (or `hf auth login`)")
        if isinstance(exc, errors.RevisionNotFoundError):
            return BadInput(f"{repo} has no revision {revision!r} on {self.endpoint}",
                            hint="give a branch, tag or commit that exists (--revision)")
        if isinstance(exc, errors.RepositoryNotFoundError):
            return BadInput(f"{repo} is not on {self.endpoint}, or it is private and no token with access is set",
                            hint="check the id; for a private or gated model set HF_TOKEN")
        if isinstance(exc, getattr(errors, "RemoteEntryNotFoundError", ())) or isinstance(
                exc, getattr(errors, "EntryNotFoundError", ())) or status == 404:
            return BadInput(f"{what} does not exist on {self.endpoint} (HTTP 404)")
        if status == 429:
            retry = exc.response.headers.get("Retry-After")
            after = f"retry after {retry} s" if retry else "retry later"
            return BadInput(f"{self.endpoint} is rate limiting requests (HTTP 429) while reading {what}",
                            hint=f"{after}; a token (HF_TOKEN) has a higher limit")
        if status in (401, 403):
            return BadInput(f"{self.endpoint} refused {what} (HTTP {status})", hint="set HF_TOKEN to a token with "
                                                                                    "access")
        if status is not None:
            return BadInput(f"{self.endpoint} answered HTTP {status} for {what}")
        if _is_timeout(exc):
            return BadInput(f"{self.endpoint} sent nothing for {self.timeout:g} s while reading {what}",
                            hint="retry, or raise HF_HUB_DOWNLOAD_TIMEOUT")
        return BadInput(f"connection to {self.endpoint} failed while reading {what}: {_short(exc)}",
                        hint="retry when the network is back; HF_HUB_OFFLINE=1 reads only cached models")


def _content_range_total(value: str | None) -> int | None:
    """The total size in `Content-Range: bytes a-b/TOTAL`."""
    if not value or "/" not in value:
        return None
    total = value.rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None


def _is_timeout(exc: Exception) -> bool:
    # httpx (huggingface_hub >= 1.0), httpx2 (2.x) and requests (< 1.0) each have their own
    # timeout classes; their names all say so.
    return any("Timeout" in cls.__name__ for cls in type(exc).__mro__) or isinstance(exc, TimeoutError)


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text and text[0] else type(exc).__name__
