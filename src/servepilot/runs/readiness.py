"""Is the engine answering HTTP? /health first, then /v1/models for the served model."""

from __future__ import annotations

from dataclasses import dataclass

# Short: the probe runs inside the supervisor loop and must not delay noticing an exit.
# Loopback connects take well under a millisecond; a server that accepts but has not
# answered in a second is not ready yet.
PROBE_TIMEOUT_S = 1.0
CONNECT_TIMEOUT_S = 0.25


@dataclass(frozen=True)
class Probe:
    ready: bool
    served_models: tuple[str, ...] = ()
    detail: str = ""


def probe_host(host: str | None) -> str:
    """Where to connect for a server bound to `host` (a wildcard bind is reached locally)."""
    if not host or host in ("0.0.0.0", "::", "[::]", "*"):
        return "127.0.0.1"
    return host


def base_url(host: str | None, port: int) -> str:
    h = probe_host(host)
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"http://{h}:{port}"


def probe(url: str, client=None) -> Probe:
    """Ready when /health answers 200, or (servers without /health, such as
    llama-cpp-python's) when /v1/models does. Served models come from /v1/models."""
    import httpx

    own = client is None
    client = client or httpx.Client(timeout=httpx.Timeout(PROBE_TIMEOUT_S, connect=CONNECT_TIMEOUT_S), trust_env=False)
    try:
        try:
            health = client.get(f"{url}/health")
        except httpx.HTTPError as exc:
            return Probe(False, detail=f"/health: {type(exc).__name__}")
        if health.status_code not in (200, 404):
            return Probe(False, detail=f"/health answered {health.status_code}")
        try:
            models = client.get(f"{url}/v1/models")
        except httpx.HTTPError as exc:
            return Probe(health.status_code == 200, detail=f"/v1/models: {type(exc).__name__}")
        served: tuple[str, ...] = ()
        if models.status_code == 200:
            try:
                data = models.json().get("data", [])
                served = tuple(str(m.get("id")) for m in data if isinstance(m, dict))
            except (ValueError, AttributeError, TypeError):  # not JSON, or not the OpenAI shape
                served = ()
        # 401/403: a server started with --api-key answers, it just will not list its models
        # to us (llama-cpp-python has no open /health to ask instead).
        ready = health.status_code == 200 or models.status_code in (200, 401, 403)
        return Probe(ready, served, f"/health {health.status_code}, /v1/models {models.status_code}")
    finally:
        if own:
            client.close()
