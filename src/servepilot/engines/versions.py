"""The engine version installed here, read from package metadata (never by importing it)."""

from __future__ import annotations

# Distribution that carries each engine's Python server. llama.cpp's own binaries
# (llama-server) carry no package metadata; their version is only known from --engine-version.
DISTRIBUTIONS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llama_cpp.server": "llama_cpp_python",
}


def distribution_for(engine: str, program: str | None = None) -> str | None:
    if engine == "llama.cpp":
        return DISTRIBUTIONS["llama_cpp.server"] if program and "llama_cpp.server" in program else None
    return DISTRIBUTIONS.get(engine)


def installed_version(engine: str, program: str | None = None) -> str | None:
    """The installed version of the engine's package, or None when it is not installed here."""
    dist = distribution_for(engine, program)
    if dist is None:
        return None
    from importlib import metadata  # lazy: importing it costs ~60 ms (email parsing modules)

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
