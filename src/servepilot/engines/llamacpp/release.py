"""What a llama.cpp build carries beyond its choices for one deployment (see ReleaseFacts):
the default CUDA architectures of builds from before the 2024 rename of the executables."""

from __future__ import annotations

from servepilot.engines import knowledge as kb
from servepilot.engines.progname import basename
from servepilot.engines.resolution import ReleaseFacts
from servepilot.engines.vllm.release import quant_speed, transformers_config_types


def release_facts(dep, res) -> ReleaseFacts:
    old = kb.load_file("llamacpp", "builds").old_programs
    program = basename(dep.launch.argv[0]) if dep.launch.argv else ""
    build = None
    if program in old["programs"]:
        build = (tuple(old["archs"]), old["source"], f"a llama.cpp build of the `{program}` era")
    return ReleaseFacts(
        version=dep.engine_version or res.engine_version,
        build_archs=build,
        quant_speed=quant_speed(),
        config_types=transformers_config_types(),
    )
