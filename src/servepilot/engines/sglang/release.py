"""What an SGLang release carries beyond its choices for one deployment (see ReleaseFacts):
its sgl-kernel's architectures; config classes are transformers' own."""

from __future__ import annotations

from servepilot.engines import knowledge as kb
from servepilot.engines.resolution import ReleaseFacts
from servepilot.engines.vllm.release import quant_speed, transformers_config_types


def release_facts(dep, res) -> ReleaseFacts:
    version = dep.engine_version or res.engine_version
    wheel = kb.row_for(kb.load_file("sglang", "builds").wheels, version) if version else None
    return ReleaseFacts(
        version=version,
        build_archs=(tuple(wheel.archs), wheel.source, f"SGLang {version}'s sgl-kernel") if wheel else None,
        wheel=wheel,
        quant_speed=quant_speed(),
        config_types=transformers_config_types(),
    )
