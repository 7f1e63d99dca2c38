"""The GPU catalog (data/gpus.json): look up `--gpu NAME[xN]` and NVML-reported names.

    cluster_from_flag("rtx-pro-6000x8")   # Cluster(source="flag", 8 x RTX PRO 6000 Blackwell)
    match_nvml_name("NVIDIA H100 80GB HBM3")  # the h100-sxm entry
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from servepilot.datafile import resource_path
from servepilot.errors import UnknownGpu
from servepilot.hardware.cluster import Cluster, Gpu

MIB = 1024 * 1024
# Words NVML (and AMD's tools) put in names that do not tell GPUs apart ("NVIDIA GeForce RTX
# 4090", "Tesla T4", "AMD Instinct MI300X").
_NOISE = {"nvidia", "geforce", "tesla", "edition", "generation", "amd", "instinct"}


@dataclass(frozen=True)
class GpuModel:
    key: str
    name: str
    nvml_names: tuple[str, ...]
    aliases: tuple[str, ...]
    compute_capability: tuple[int, int] | None  # None on AMD GPUs (gfx_arch instead)
    memory_bytes: int
    memory_basis: str  # "nvidia-smi" | "nominal"
    bandwidth_gbps: float
    fp8: bool
    fp4: bool
    link: str  # "nvlink" | "pcie"
    sources: dict
    vendor: str = "nvidia"
    gfx_arch: str | None = None
    fp8_formats: tuple[str, ...] = ()

    def gpu(self, index: int) -> Gpu:
        return Gpu(
            index=index,
            name=self.name,
            key=self.key,
            memory_bytes=self.memory_bytes,
            compute_capability=self.compute_capability,
            fp8=self.fp8,
            fp4=self.fp4,
            bandwidth_gbps=self.bandwidth_gbps,
            nvlink=self.link == "nvlink",
            vendor=self.vendor,
            gfx_arch=self.gfx_arch,
            fp8_formats=self.fp8_formats,
        )


@lru_cache(maxsize=1)
def _data() -> dict:
    text = resource_path("servepilot.hardware", "data/gpus.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def models() -> tuple[GpuModel, ...]:
    out = []
    for e in _data()["gpus"]:
        out.append(
            GpuModel(
                key=e["key"],
                name=e["name"],
                nvml_names=tuple(e["nvml_names"]),
                aliases=tuple(e["aliases"]),
                compute_capability=_cc(e.get("compute_capability")),
                memory_bytes=int(e["memory_mib"]) * MIB,
                memory_basis=e["memory_basis"],
                bandwidth_gbps=float(e["bandwidth_gbps"]),
                fp8=bool(e["fp8"]),
                fp4=bool(e["fp4"]),
                link=e["link"],
                sources=e["sources"],
                vendor=e.get("vendor", "nvidia"),
                gfx_arch=e.get("gfx_arch"),
                fp8_formats=tuple(e.get("fp8_formats") or ()),
            )
        )
    return tuple(out)


def _cc(value) -> tuple[int, int] | None:
    """An entry's compute capability; null on AMD GPUs (they have a gfx_arch instead)."""
    return tuple(value) if value else None


def by_key(key: str) -> GpuModel | None:
    return next((m for m in models() if m.key == key), None)


def precision_for(cc: tuple[int, int] | None) -> tuple[bool | None, bool | None]:
    """(FP8, FP4) tensor-core support by compute capability, for GPUs not in the catalog."""
    if cc is None:
        return None, None
    rule = _data()["precision_by_compute_capability"]
    fp8 = tuple(cc) >= tuple(rule["fp8_min"])
    fp4 = cc[0] in rule["fp4_majors"]
    return fp8, fp4


def _flag_form(text: str) -> str:
    """"RTX PRO 6000 Blackwell" / "rtx_pro_6000" -> "rtx-pro-6000-blackwell"."""
    return re.sub(r"[\s_]+", "-", text.strip().lower()).strip("-")


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[\s_\-]+", name.lower()) if w and w not in _NOISE]


def all_aliases() -> dict[str, GpuModel]:
    out: dict[str, GpuModel] = {}
    for m in models():
        for alias in (m.key, *m.aliases):
            out.setdefault(alias, m)
    return out


def lookup_alias(name: str) -> GpuModel:
    """The catalog entry for a --gpu name; UnknownGpu with the nearest names otherwise."""
    wanted = _flag_form(name)
    aliases = all_aliases()
    if wanted in aliases:
        return aliases[wanted]
    compact = {a.replace("-", ""): m for a, m in aliases.items()}
    if wanted.replace("-", "") in compact:
        return compact[wanted.replace("-", "")]
    matched = match_nvml_name(name)
    if matched is not None:
        return matched
    # One suggestion per GPU: "rtxpro6000" and "rtx-pro-6000" name the same card.
    near: list[str] = []
    seen: set[str] = set()
    import difflib  # lazy: only an unknown --gpu needs suggestions

    # "mi50" names a card sold in two sizes (mi50-16gb, mi50-32gb): those first
    sized = [a for a in aliases if a.startswith(wanted + "-")]
    for alias in sized + difflib.get_close_matches(wanted, list(aliases), n=12, cutoff=0.5):
        if aliases[alias].key not in seen and len(near) < 3:
            seen.add(aliases[alias].key)
            near.append(alias)
    if near:
        hint = f"did you mean {', '.join(near)}?"
    else:  # nothing close (an AMD or TPU name, a typo of a family): show what the catalog has
        hint = "GPUs known: " + ", ".join(m.key for m in models())
    raise UnknownGpu(f"unknown GPU {name!r}", hint=hint)


_COUNT_SUFFIX = re.compile(r"^(?P<name>.+?)\s*[x*×](?P<count>\d+)$", re.IGNORECASE)
_COUNT_PREFIX = re.compile(r"^(?P<count>\d+)\s*[x*×]\s*(?P<name>.+)$", re.IGNORECASE)


def parse_gpu_flag(value: str) -> tuple[GpuModel, int]:
    """`rtx-pro-6000x8` -> (entry, 8); `8xh100` and `t4` work too."""
    text = value.strip()
    if not text:
        raise UnknownGpu("empty --gpu value", hint="e.g. --gpu h200x8")
    for pattern in (_COUNT_SUFFIX, _COUNT_PREFIX):
        m = pattern.match(text)
        if m:
            try:
                model = lookup_alias(m.group("name"))
            except UnknownGpu:
                continue  # "h100-sxm" must not lose its x to a count; try the whole text
            count = int(m.group("count"))
            if count < 1:
                raise UnknownGpu(f"--gpu {value!r} asks for {count} GPUs")
            return model, count
    return lookup_alias(text), 1


def cluster_from_flag(value: str) -> Cluster:
    """A Cluster of catalog GPUs for `--gpu NAME[xN]`.

    A name the catalog lacks but that names another vendor's accelerator (Gaudi, Ascend, an
    Intel Arc, an AMD gfx target) gives GPUs of unknown memory and capability: check answers
    `unknown` for them rather than refusing the name (exit 2) or judging them as NVIDIA GPUs.
    A name that is neither (a typo) stays an UnknownGpu with suggestions.

    Entries joined by "+" describe a box of different GPUs in CUDA's order, e.g.
    `rtx-5070-ti+rtx-5090` or `a100-80gbx2+a100-40gbx2`."""
    if "+" in value:
        return _mixed_cluster(value)
    try:
        model, count = parse_gpu_flag(value)
    except UnknownGpu:
        unmodelled = unmodelled_cluster(value)
        if unmodelled is None:
            raise
        return unmodelled
    notes = []
    if model.memory_basis != "nvidia-smi":
        tool = "nvidia-smi" if model.vendor == "nvidia" else "amd-smi"
        notes.append(f"{model.name}: memory is the nominal size ({model.memory_bytes // MIB} MiB), not a measured "
                     f"{tool} total")
    return Cluster(
        gpus=tuple(model.gpu(i) for i in range(count)),
        source="flag",
        topology=model.link if count > 1 else None,
        notes=tuple(notes),
    )


def _mixed_cluster(value: str) -> Cluster:
    """`--gpu a+b`: each entry a catalog GPU with an optional count, indexed in order."""
    gpus, notes, kinds = [], [], []
    for entry in value.split("+"):
        if not entry.strip():
            raise UnknownGpu(f"--gpu {value!r} has an empty entry",
                             hint="e.g. --gpu rtx-5070-ti+rtx-5090")
        model, count = parse_gpu_flag(entry)
        kinds.append(model)
        start = len(gpus)
        gpus.extend([model.gpu(start + i) for i in range(count)])
        if model.memory_basis != "nvidia-smi":
            tool = "nvidia-smi" if model.vendor == "nvidia" else "amd-smi"
            notes.append(f"{model.name}: memory is the nominal size "
                         f"({model.memory_bytes // MIB} MiB), not a measured {tool} total")
    one_link = len({m.link for m in kinds}) == 1
    return Cluster(gpus=tuple(gpus), source="flag",
                   topology=kinds[0].link if one_link and len(gpus) > 1 else None,
                   notes=tuple(dict.fromkeys(notes)))


def match_nvml_name(name: str, memory_bytes: int | None = None) -> GpuModel | None:
    """The catalog entry for an NVML device name, tolerant of vendor words and spacing.

    Exact names first ("NVIDIA H100 80GB HBM3"), then the entries whose name words all
    appear in `name`, most words winning; ties go to the closest memory size.
    """
    words = _words(name)
    joined = " ".join(words)
    exact = [m for m in models() if any(" ".join(_words(n)) == joined for n in m.nvml_names)]
    if exact:
        # one NVML name, two memory sizes (RTX 4060 Ti 8/16 GB): the probed memory decides
        if memory_bytes and len(exact) > 1:
            exact.sort(key=lambda m: abs(m.memory_bytes - memory_bytes))
        return exact[0]
    best: list[tuple[int, GpuModel]] = []
    for m in models():
        for candidate in m.nvml_names:
            cw = _words(candidate)
            if cw and all(w in words for w in cw):
                best.append((len(cw), m))
    if not best:
        return None
    top = max(n for n, _ in best)
    tied = [m for n, m in best if n == top]
    if memory_bytes and len(tied) > 1:
        tied.sort(key=lambda m: abs(m.memory_bytes - memory_bytes))
    return tied[0]


_GFX = re.compile(r"gfx(\d{3,4}[a-z]?)", re.IGNORECASE)


def unmodelled_family(name: str) -> dict | None:
    """The accelerator family (gpus.json `unmodelled_accelerators`) a name not in the catalog
    belongs to: {"vendor", "platform", "served_by", "source", ...}, or None."""
    text = "-" + _flag_form(name) + "-"
    for family in _data().get("unmodelled_accelerators", {}).get("families", ()):
        # a family word starts a token and ends it or runs into a number: "gaudi3", "arc-a770",
        # "ascend910b", but not "archer"
        if any(re.search(rf"-{re.escape(w)}(?=[-\d])", text) for w in family["words"]):
            return family
    return None


def unmodelled_cluster(value: str) -> Cluster | None:
    """GPUs of a recognised vendor family that the catalog lacks: memory 0 (unknown), no compute
    capability; an AMD name with a gfx target keeps it (`--gpu gfx1100x2`)."""
    text = value.strip()
    count = 1
    for pattern in (_COUNT_SUFFIX, _COUNT_PREFIX):
        m = pattern.match(text)
        if m and unmodelled_family(m.group("name")) is not None:
            text, count = m.group("name"), int(m.group("count"))
            break
    family = unmodelled_family(text)
    if family is None or count < 1:
        return None
    gfx = _GFX.search(text)
    arch = f"gfx{gfx.group(1).lower()}" if gfx and family["vendor"] == "amd" else None
    gpus = tuple(
        Gpu(index=i, name=text, key=None, memory_bytes=0, compute_capability=None,
            vendor=family["vendor"], gfx_arch=arch)
        for i in range(count)
    )
    unknown = "memory is" if arch else "memory and kernels are"
    note = f"{text}: {family['platform']}, not in servepilot's GPU catalog: its {unknown} unknown"
    return Cluster(gpus=gpus, source="flag", notes=(note,))
