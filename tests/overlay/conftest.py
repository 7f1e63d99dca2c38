"""Fixtures for overlay tests: small checkpoints built in tmp dirs, and a way to prove
that a directory was not written to (content hashes plus inode, size, mtime and ctime of
every entry: the tests run as root, where chmod a-w stops nothing)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

KV_SCHEME_PATCHES = {
    "config.json": [{"op": "remove", "path": "/quantization_config/kv_cache_scheme"}],
    "hf_quant_config.json": [{"op": "remove", "path": "/quantization/kv_cache_quant_algo"}],
}


def write_checkpoint(root: Path) -> Path:
    """A modelopt-style checkpoint: two JSON files with a KV scheme, fake shards, a sub-dir."""
    root.mkdir(parents=True)
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
        },
    }
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    hf_quant = {"producer": {"name": "modelopt"},
                "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16}}
    # four-space indent and no final newline: the overlay must keep both
    (root / "hf_quant_config.json").write_text(json.dumps(hf_quant, indent=4))
    for i in (1, 2):
        (root / f"model-0000{i}-of-00002.safetensors").write_bytes(os.urandom(4096))
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "tokenizer.json").write_text('{"version": "1.0"}')
    return root


def inventory(root: Path) -> dict[str, tuple]:
    """Every entry under root (lstat, links not followed) with what a write would change."""
    out = {}
    for here, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [".", *dirnames, *filenames]:
            full = Path(here) if name == "." else Path(here, name)
            st = full.lstat()
            digest = None
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(full.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(full)
            key = full.relative_to(root).as_posix()
            out[key] = (digest, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
    return out


def make_read_only(root: Path) -> None:
    for here, _dirnames, filenames in os.walk(root):
        for name in filenames:
            p = Path(here, name)
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & ~0o222)
        Path(here).chmod(Path(here).stat().st_mode & ~0o222)


def make_writable(root: Path) -> None:
    for here, _dirnames, filenames in os.walk(root):
        Path(here).chmod(Path(here).stat().st_mode | 0o200)
        for name in filenames:
            p = Path(here, name)
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | 0o200)


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    return write_checkpoint(tmp_path / "models" / "ckpt")


@pytest.fixture
def read_only_checkpoint(checkpoint):
    make_read_only(checkpoint)
    yield checkpoint
    make_writable(checkpoint)  # so pytest can clean tmp_path


def write_hf_snapshot(cache: Path, repo: str = "models--acme--tiny", rev: str = "0123456789abcdef0123") -> Path:
    """The huggingface_hub cache layout: snapshots/<rev>/<file> -> ../../blobs/<sha256>."""
    staging = cache / "staging"
    write_checkpoint(staging)
    repo_dir = cache / repo
    blobs = repo_dir / "blobs"
    snapshot = repo_dir / "snapshots" / rev
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(rev)
    for here, _dirs, files in os.walk(staging):
        for name in files:
            src = Path(here, name)
            rel = src.relative_to(staging)
            data = src.read_bytes()
            blob = blobs / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            link = snapshot / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(blob, link.parent), link)
    for here, _dirs, files in os.walk(staging, topdown=False):
        for name in files:
            Path(here, name).unlink()
        Path(here).rmdir()
    return snapshot
