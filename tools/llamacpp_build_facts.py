"""Read llama.cpp's own tables per build, from two registries' packages of its source.

Offline, not run in CI. Get the packages first (one file each, nothing installed):

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d PKGS  # and others
    (cd PKGS && npm pack node-llama-cpp@3.20.0)                                  # and others

then

    python tools/llamacpp_build_facts.py PKGS/*.tar.gz PKGS/*.tgz \
        > src/servepilot/engines/llamacpp/knowledge/build_facts.json
    python tools/llamacpp_build_facts.py --hf-map PKGS/node-llama-cpp-3.20.0.tgz \
        > bench/llamacpp_gguf_archs.json

node-llama-cpp (npm) ships, in each release, llama/gitRelease.bundle: a git bundle of the
llama.cpp release it builds, whose tag (bNNNN, the build number `llama-server --version`
prints) llama/llama.cpp.info.json names (llama/binariesGithubRelease.json in 2.x). Those
trees are keyed by build number; releases whose tag is not bNNNN are skipped.

A llama-cpp-python sdist carries llama.cpp under vendor/llama.cpp; the commit it vendors is
the one its CHANGELOG.md names for that release ("Update llama.cpp to ggerganov/llama.cpp@SHA").
The sdist holds no git metadata, so the build number of that commit is not known here: those
facts are keyed by llama-cpp-python version (and the commit, where the CHANGELOG names one).

Read per tree:
  architectures   LLM_ARCH_NAMES (llama.cpp, later src/llama-arch.cpp): the names
                  general.architecture may hold; any other raises "unknown model architecture"
  pre_tokenizers  the `tokenizer_pre == "..."` comparisons of the BPE vocabulary loader
                  (llama.cpp, later src/llama-vocab.cpp); a tree without the error
                  "unknown pre-tokenizer type" does not check the name at all
  ggml_types      enum ggml_type (ggml.h, later ggml/include/ggml.h), commented-out
                  (removed) entries left out
  max_experts     #define LLAMA_MAX_EXPERTS (llama.cpp, src/llama.cpp, later
                  src/llama-hparams.h): the model loader asserts
                  GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS), so a GGUF with more
                  experts aborts the load; null in a tree without it (no MoE support yet)

`--add-max-experts FACTS PKGS...` reads only max_experts from the packages given and writes it
into the snapshots of FACTS (a build_facts.json) with the same key, leaving the rest as it is
(a snapshot without the field was not read for it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from packaging.version import Version

ARCH_FILES = ("src/llama-arch.cpp", "src/llama.cpp", "llama.cpp")
VOCAB_FILES = ("src/llama-vocab.cpp", "src/llama-model.cpp", "src/llama.cpp", "llama.cpp")
GGML_FILES = ("ggml/include/ggml.h", "ggml.h")
MAX_EXPERTS_FILES = ("src/llama-hparams.h", "src/llama.cpp", "llama.cpp")
_MAX_EXPERTS = re.compile(r"^\s*#\s*define\s+LLAMA_MAX_EXPERTS\s+(\d+)", re.M)
VENDOR = "vendor/llama.cpp/"
PRE_ERROR = "unknown pre-tokenizer type"


def _first(read, paths, needle) -> tuple[str, str] | tuple[None, None]:
    """The first of `paths` (relative to the llama.cpp root) whose text holds `needle`."""
    for p in paths:
        text = read(p)
        if text is not None and needle in text:
            return p, text
    return None, None


def _tables(read) -> dict:
    arch_path, arch_text = _first(read, ARCH_FILES, "LLM_ARCH_NAMES")
    vocab_path, vocab_text = _first(read, VOCAB_FILES, PRE_ERROR)
    ggml_path, ggml_text = _first(read, GGML_FILES, "enum ggml_type")
    experts_path, experts_text = _first(read, MAX_EXPERTS_FILES, "LLAMA_MAX_EXPERTS")
    if arch_text is None or ggml_text is None:
        raise SystemExit("no LLM_ARCH_NAMES or enum ggml_type found")
    return {
        "files": {
            "architectures": arch_path,
            "pre_tokenizers": vocab_path,
            "ggml_types": ggml_path,
            "max_experts": experts_path,
        },
        "max_experts": max_experts(experts_text) if experts_text else None,
        "architectures": architectures(arch_text),
        "pre_tokenizers": pre_tokenizers(vocab_text) if vocab_text else None,
        "ggml_types": ggml_types(ggml_text),
    }


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def architectures(text: str) -> list[str]:
    block = re.search(r"LLM_ARCH_NAMES\s*=\s*\{(.*?)\n\};", text, re.S)
    if block is None:
        raise ValueError("no LLM_ARCH_NAMES table")
    names = re.findall(
        r"\{\s*LLM_ARCH_(\w+)\s*,\s*\"([^\"]+)\"\s*\}", _strip_comments(block.group(1))
    )
    return sorted(name for key, name in names if key != "UNKNOWN")


def pre_tokenizers(text: str) -> list[str]:
    names = set(re.findall(r"tokenizer_pre\s*==\s*\"([^\"]+)\"", _strip_comments(text)))
    return sorted(names)


def max_experts(text: str) -> int | None:
    """LLAMA_MAX_EXPERTS as the tree defines it."""
    m = _MAX_EXPERTS.search(text)
    return int(m.group(1)) if m else None


def ggml_types(text: str) -> list[str]:
    block = re.search(r"enum\s+ggml_type\s*\{(.*?)\}", text, re.S)
    if block is None:
        raise ValueError("no enum ggml_type")
    names = re.findall(r"\bGGML_TYPE_(\w+)", _strip_comments(block.group(1)))
    return sorted(n for n in dict.fromkeys(names) if n != "COUNT")


def vendored_commit(changelog: str, version: str) -> str | None:
    """The llama.cpp commit the CHANGELOG section of `version` says it updated to (the first
    such line of the section is the last update before the release)."""
    section = re.search(rf"^## \[{re.escape(version)}\]\n(.*?)(?=^## \[)", changelog, re.S | re.M)
    if section is None:
        return None
    m = re.search(r"[Uu]pdate llama\.cpp to \S*?@?\b([0-9a-f]{7,40})\b", section.group(1))
    return m.group(1) if m else None


def read_sdist(path: str) -> dict:
    """A llama-cpp-python sdist: the llama.cpp under vendor/llama.cpp, keyed by its version."""
    version = re.search(r"llama_cpp_python-([\d.]+)\.tar\.gz$", path).group(1)
    with tarfile.open(path) as tar:
        members = {m.name.split("/", 1)[-1]: m for m in tar.getmembers() if m.isfile()}

        def read(rel: str) -> str | None:
            m = members.get(rel)
            return tar.extractfile(m).read().decode("utf-8", "replace") if m else None

        changelog = read("CHANGELOG.md") or ""
        snap = _tables(lambda rel: read(VENDOR + rel))
    commit = vendored_commit(changelog, version)
    where = f"llama.cpp@{commit[:12]}" if commit else "llama.cpp commit not named in its CHANGELOG"
    snap.update(
        key=version, label=f"llama-cpp-python=={version} vendor/llama.cpp ({where})", commit=commit
    )
    return snap


def read_npm(path: str) -> dict | None:
    """A node-llama-cpp npm package: llama/llama.cpp.info.json names the llama.cpp release tag
    (bNNNN) and llama/gitRelease.bundle holds that release's tree: facts keyed by build."""
    with tarfile.open(path) as tar, tempfile.TemporaryDirectory() as tmp:
        names = set(tar.getnames())
        if "package/llama/gitRelease.bundle" not in names:
            print(f"{path}: no llama/gitRelease.bundle, skipped", file=sys.stderr)
            return None
        # 3.x names the tree's tag in llama.cpp.info.json; 2.x only the release its binaries
        # were built from (the same release the bundle was cut from)
        if "package/llama/llama.cpp.info.json" in names:
            tag = json.load(tar.extractfile("package/llama/llama.cpp.info.json"))["tag"]
        else:
            tag = json.load(tar.extractfile("package/llama/binariesGithubRelease.json"))["release"]
        if not re.fullmatch(r"b\d+", tag):
            print(f"{path}: llama.cpp tag {tag!r} is not a build number, skipped", file=sys.stderr)
            return None
        package = json.load(tar.extractfile("package/package.json"))
        bundle = Path(tmp, "release.bundle")
        bundle.write_bytes(tar.extractfile("package/llama/gitRelease.bundle").read())
        repo = Path(tmp, "repo")
        subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(repo)], check=True)

        def read(rel: str) -> str | None:
            shown = subprocess.run(
                ["git", "-C", str(repo), "show", f"HEAD:{rel}"], capture_output=True
            )
            return shown.stdout.decode("utf-8", "replace") if shown.returncode == 0 else None

        snap = _tables(read)
    snap.update(
        key=int(tag[1:]),
        tag=tag,
        label=f"llama.cpp {tag} (the release tree in node-llama-cpp {package['version']}, "
        "llama/gitRelease.bundle)",
    )
    return snap


def _source(snap: dict, kind: str) -> str:
    if "tag" in snap:
        return f"{snap['files'][kind]}@{snap['tag']}"
    return f"{snap['files'][kind]} in {snap['label']}"


def _ranges(snapshots: list[dict], kind: str) -> dict:
    """name -> first and last snapshot key seen, the keys read in between that lack it, and
    the file@tag (or file in package==version) of its first sighting."""
    out: dict[str, dict] = {}
    for snap in snapshots:
        for name in snap[kind] or ():
            row = out.setdefault(name, {"first": snap["key"], "source": _source(snap, kind)})
            row["last"] = snap["key"]
    return dict(sorted(out.items()))


def _table(snapshots: list[dict]) -> dict:
    for kind in ("architectures", "pre_tokenizers", "ggml_types"):
        for snap in snapshots:
            snap.setdefault("sets", {})[kind] = set(snap[kind] or ())
    return {
        "snapshots": [
            {k: s[k] for k in ("key", "tag", "commit", "label") if k in s}
            | {
                "files": s["files"],
                "checks_pre_tokenizer": s["pre_tokenizers"] is not None,
                "max_experts": s["max_experts"],
            }
            for s in snapshots
        ],
        **{
            kind: _with_gaps(snapshots, kind)
            for kind in ("architectures", "pre_tokenizers", "ggml_types")
        },
    }


def _with_gaps(snapshots: list[dict], kind: str) -> dict:
    rows = _ranges(snapshots, kind)
    keys = [s["key"] for s in snapshots]
    for name, row in rows.items():
        inside = range(keys.index(row["first"]), keys.index(row["last"]) + 1)
        gaps = [keys[i] for i in inside if name not in snapshots[i]["sets"][kind]]
        row.pop("absent_in", None)
        if gaps:
            row["absent_in"] = gaps
    return rows


# ---- the converter's map, for bench/bench_check.py -------------------------------------------

_REGISTERED = re.compile(
    r"((?:^@(?:ModelBase|Model)\.register\((?:[^()]|\([^()]*\))*\)\s*\n)+)"
    r"^class (\w+)\(([^)]*)\):\n(.*?)(?=^\S|\Z)", re.S | re.M)
_CLASS = re.compile(r"^class (\w+)\(([^)]*)\):\n(.*?)(?=^\S|\Z)", re.S | re.M)
_ARCH_LINE = re.compile(r"^    model_arch\s*=\s*gguf\.MODEL_ARCH\.(\w+)", re.M)


def converter_archs(read, files: list[str]) -> dict[str, str]:
    """Hugging Face architecture -> general.architecture, as convert_hf_to_gguf.py (later
    conversion/*.py) writes it: each text-model class registered for the HF class names sets
    model_arch (or inherits it); vision/audio projector classes (MmprojModel) are left out."""
    texts = [read(f) or "" for f in files]
    constants = read("gguf-py/gguf/constants.py") or ""
    names_block = re.search(r"MODEL_ARCH_NAMES[^=]*=\s*\{(.*?)\n\}", constants, re.S)
    arch_names = dict(re.findall(r"MODEL_ARCH\.(\w+)\s*:\s*\"([^\"]+)\"", names_block.group(1)))
    classes: dict[str, tuple[list[str], str | None]] = {}
    for text in texts:
        for name, bases, body in _CLASS.findall(text):
            arch = _ARCH_LINE.search(body)
            classes[name] = ([b.strip().split(".")[-1] for b in bases.split(",") if b.strip()],
                             arch.group(1) if arch else None)

    def resolve(name: str, seen=()) -> str | None:
        if name in seen or name not in classes:
            return None
        bases, arch = classes[name]
        if any(_projector(b, classes) for b in bases):
            return None
        if arch:
            return arch
        for b in bases:
            found = resolve(b, (*seen, name))
            if found:
                return found
        return None

    out: dict[str, str] = {}
    for text in texts:
        for decorators, name, _bases, _body in _REGISTERED.findall(text):
            arch = resolve(name)
            if arch is None or arch not in arch_names:
                continue
            for hf in re.findall(r"\"(\w+)\"", decorators):
                out.setdefault(hf, arch_names[arch])
    return dict(sorted(out.items()))


def _projector(name: str, classes: dict, depth: int = 0) -> bool:
    if name == "MmprojModel":
        return True
    if name not in classes or depth > 20:
        return False
    return any(_projector(b, classes, depth + 1) for b in classes[name][0])


def hf_map(path: str) -> dict:
    """The converter map of one node-llama-cpp release tree."""
    with tarfile.open(path) as tar, tempfile.TemporaryDirectory() as tmp:
        tag = json.load(tar.extractfile("package/llama/llama.cpp.info.json"))["tag"]
        bundle = Path(tmp, "release.bundle")
        bundle.write_bytes(tar.extractfile("package/llama/gitRelease.bundle").read())
        repo = Path(tmp, "repo")
        subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(repo)], check=True)
        listed = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.split()
        files = [f for f in listed if f.startswith("conversion/") and f.endswith(".py")]
        files = files or ["convert_hf_to_gguf.py"]

        def read(rel: str) -> str | None:
            shown = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{rel}"], capture_output=True)
            return shown.stdout.decode("utf-8", "replace") if shown.returncode == 0 else None

        archs = converter_archs(read, files)
    where = "conversion/*.py" if files[0].startswith("conversion/") else files[0]
    return {"about": "Hugging Face architecture -> the general.architecture llama.cpp's converter "
                     "writes (tools/llamacpp_build_facts.py --hf-map); used by bench/bench_check.py "
                     "to write a row's GGUF",
            "source": f"{where} and gguf-py/gguf/constants.py (MODEL_ARCH_NAMES)@{tag}",
            "architectures": archs}


def add_max_experts(facts_path: str, paths: list[str]) -> dict:
    """FACTS with max_experts (and the file it was read from) set on the snapshots that the
    packages given are; the other snapshots are left unread for it."""
    data = json.loads(Path(facts_path).read_text())
    for path in paths:
        table, snap = (
            ("llama_cpp_python", read_sdist(path))
            if path.endswith(".tar.gz")
            else ("llama_cpp", read_npm(path))
        )
        if snap is None:
            continue
        for row in data[table]["snapshots"]:
            if row["key"] == snap["key"]:
                row["files"]["max_experts"] = snap["files"]["max_experts"]
                row["max_experts"] = snap["max_experts"]
                break
        else:
            print(f"{path}: {snap['key']} is not a snapshot of {table}, skipped", file=sys.stderr)
    return data


def main(paths: list[str]) -> int:
    if paths and paths[0] == "--add-max-experts":
        json.dump(add_max_experts(paths[1], paths[2:]), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if paths and paths[0] == "--hf-map":
        json.dump(hf_map(paths[1]), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    sdists = sorted(
        (read_sdist(p) for p in paths if p.endswith(".tar.gz")), key=lambda s: Version(s["key"])
    )
    npms = [s for s in (read_npm(p) for p in paths if p.endswith(".tgz")) if s is not None]
    npms = sorted({s["key"]: s for s in npms}.values(), key=lambda s: s["key"])
    data = {
        "about": "llama.cpp's own tables (LLM_ARCH_NAMES, the BPE pre-tokenizer names, enum "
        "ggml_type) per build, written by tools/llamacpp_build_facts.py. llama_cpp: "
        "release trees keyed by build number (tag bNNNN), read from the release bundle "
        "node-llama-cpp ships. llama_cpp_python: the llama.cpp llama-cpp-python sdists "
        "vendor, keyed by llama-cpp-python version (the vendored commit is the one its "
        "CHANGELOG.md names; its build number is not known from the sdist).",
        "llama_cpp": _table(npms),
        "llama_cpp_python": _table(sdists),
    }
    json.dump(data, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
