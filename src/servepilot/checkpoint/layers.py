"""config.json → one LayerSpec per decoder layer: the model as the engine builds it.

Each family states its layer kinds its own way; every variant is read here, once, and every
verb (inspect, check, plan, the remedies) reads the result. Where a key is read from, per
family (vLLM 0.18.0 model code and its bundled config classes, transformers configs):

- `hybrid_override_pattern` (Nemotron-H: M mamba2, * attention, - dense MLP, E MoE, one mixer
  per layer; vllm/transformers_utils/configs/nemotron_h.py), or `layers_block_type` as a list
  of those words (Nemotron-3 Ultra).
- `block_configs` (DeciLM / Llama-Nemotron NAS: per layer attention no_op /
  replace_with_linear / n_heads_in_group, ffn no_op / replace_with_linear / ffn_mult;
  vllm/model_executor/models/nemotron_nas.py).
- `layer_types` (transformers 4.5x: full_attention, sliding_attention, chunked_attention,
  linear_attention, mamba, attention), else `full_attention_interval` (Qwen3-Next: every 4th
  full; configs/qwen3_next.py), `hybrid_layer_pattern` (MiMo-V2-Flash: 1 = sliding window with
  its own swa_* heads; mimo_v2_flash.py), `attn_type_list` (MiniMax-Text-01: 0 = lightning
  linear attention), `attn_layer_period/offset` (Jamba: the rest Mamba-1), `no_rope_layers`
  with `attention_chunk_size` (Llama-4: RoPE layers attend in chunks; llama4.py),
  `sliding_window_pattern` (Gemma-3), Gemma-2's alternation, Qwen2's `max_window_layers`.
- MoE layers: `mlp_only_layers` + `decoder_sparse_step` (Qwen MoE), `first_k_dense_replace` +
  `moe_layer_freq` (DeepSeek, Kimi, GLM; a list in MiMo), `interleave_moe_layer_step`
  (Llama-4: layers (i + 1) % step == 0), `moe_layer_start_index` / `moe_layer_interval`
  (ERNIE-4.5), `expert_layer_period/offset` (Jamba).
"""

from __future__ import annotations

import math

from servepilot.checkpoint.spec import LayerSpec, StateSpec

# The largest values any released model has, with a wide margin: beyond them a config.json is
# damaged or hostile, and reading it (a layer list a million long) must not take minutes.
LIMITS = {"layers": 2048, "heads": 4096, "experts": 16384, "width": 1 << 20, "vocab": 1 << 24}

# Families whose MLP is up/down only (no gate): c_fc / c_proj or fc1 / fc2 in vLLM's model files.
UNGATED_MLP_TYPES = (
    "starcoder2",
    "gpt2",
    "gpt_bigcode",
    "gpt_neox",
    "gptj",
    "phi",
    "phi-msft",
    "falcon",
    "nemotron",
)

NEMOTRON_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
LAYER_TYPE_MIXER = {
    "full_attention": "full",
    "attention": "full",
    "full": "full",
    "global": "full",
    "sliding_attention": "sliding",
    "sliding": "sliding",
    "local": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "mamba": "mamba",
}


class ConfigValueError(ValueError):
    """A geometry value no model can have (wrong type, <= 0, NaN, beyond LIMITS)."""


def check_count(key: str, value, *, minimum: int, limit: str | None) -> int | None:
    """A count from config.json as an int, None when absent; ConfigValueError when absurd."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigValueError(f"{key} is {value!r}, not a number")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ConfigValueError(f"{key} is {value!r}, not a whole number")
        value = int(value)
    if value < minimum:
        raise ConfigValueError(f"{key} is {value}, less than {minimum}")
    if limit and value > LIMITS[limit]:
        raise ConfigValueError(
            f"{key} is {value:,}, beyond any real model (at most {LIMITS[limit]:,})"
        )
    return value


def ffn_mult_to_intermediate(ffn_mult: float, hidden: int) -> int:
    """DeciLM's FFN width: 2/3 of ffn_mult x hidden, rounded up to a multiple of 256
    (nemotron_nas.py _ffn_mult_to_intermediate_size@v0.18.0)."""
    inter = int(2 * ffn_mult * hidden / 3)
    return inter if inter % 256 == 0 else inter + 256 - inter % 256


class LayerReader:
    """Builds the layer list from a _Reader (config.py) and the model-wide attention geometry."""

    def __init__(
        self, r, *, model_type: str, hidden: int, intermediate: int | None, attention, moe
    ):
        self.r, self.model_type, self.hidden = r, model_type or "", hidden
        self.inter = intermediate or 0
        self.att, self.moe = attention, moe
        self.notes: list[str] = []
        self.unknown: list[str] = []

    # -- the number of layers and each one's mixer --------------------------------------

    def read(self, num_layers: int | None) -> tuple[LayerSpec, ...]:
        r = self.r
        pattern = r.raw("hybrid_override_pattern")
        blocks = r.raw("layers_block_type")
        if isinstance(pattern, str) and pattern:
            return self._single_mixer_blocks(
                [NEMOTRON_PATTERN.get(c, c) for c in pattern], "hybrid_override_pattern"
            )
        if isinstance(blocks, list) and blocks and self.model_type.startswith("nemotron_h"):
            return self._single_mixer_blocks([str(b) for b in blocks], "layers_block_type")
        configs = r.raw("block_configs")
        if isinstance(configs, list) and configs:
            return self._nas_blocks(configs)
        if num_layers is None:
            return ()
        mixers = self._mixers(num_layers)
        return tuple(self._layer(i, mixer, window) for i, (mixer, window) in enumerate(mixers))

    def _mixers(self, n: int) -> list[tuple[str, int | None]]:
        r, mt = self.r, self.model_type
        window = r.get_int("sliding_window", "sliding_window_size", minimum=1)
        types = r.raw("layer_types")
        if isinstance(types, list) and types:
            if len(types) != n:
                self.notes.append(
                    f"layer_types lists {len(types)} layers, num_hidden_layers is {n}"
                )
            out = []
            for t in types[:n]:
                mixer = LAYER_TYPE_MIXER.get(t) if isinstance(t, str) else None
                if mixer is None:
                    self.unknown.append(
                        f"layer_types holds {t!r}, a layer kind servepilot does not know"
                    )
                    mixer = "full"
                out.append((mixer, window if mixer == "sliding" else None))
            chunk = r.get_int("attention_chunk_size", minimum=1)
            out = [(m, chunk if m == "chunked" else w) for m, w in out]
            return out + [("full", None)] * (n - len(out))
        interval = r.get_int("full_attention_interval", minimum=1)
        if interval and mt.startswith(("qwen3_next", "qwen3_5")):
            return [("full" if (i + 1) % interval == 0 else "linear", None) for i in range(n)]
        hybrid = r.raw("hybrid_layer_pattern")
        if isinstance(hybrid, list) and hybrid:
            return [
                (
                    "sliding" if (hybrid[i] if i < len(hybrid) else 0) == 1 else "full",
                    window if i < len(hybrid) and hybrid[i] == 1 else None,
                )
                for i in range(n)
            ]
        attn_types = r.raw("attn_type_list")
        if isinstance(attn_types, list) and attn_types:
            return [
                ("full" if i < len(attn_types) and attn_types[i] == 1 else "linear", None)
                for i in range(n)
            ]
        period = r.get_int("attn_layer_period", minimum=1)
        if period:  # Jamba: attention where i % period == offset, Mamba-1 elsewhere
            offset = r.get_int("attn_layer_offset", minimum=0) or 0
            return [("full" if i % period == offset else "mamba", None) for i in range(n)]
        if mt.startswith("llama4"):
            return self._llama4_mixers(n)
        if window is None or r.raw("use_sliding_window") is False:
            return [("full", None)] * n
        every = r.get_int("sliding_window_pattern", minimum=1)
        if every:  # Gemma-3: every pattern-th layer global
            return [
                ("full" if (i + 1) % every == 0 else "sliding", window if (i + 1) % every else None)
                for i in range(n)
            ]
        if (
            mt == "gemma2"
        ):  # Gemma-2: even layers slide (modeling_gemma2.py is_sliding = not bool(i % 2))
            return [
                ("sliding" if i % 2 == 0 else "full", window if i % 2 == 0 else None)
                for i in range(n)
            ]
        first_sliding = r.get_int("max_window_layers", minimum=0)
        if (
            mt.startswith("qwen2")
            and first_sliding is not None
            and r.raw("use_sliding_window") is True
        ):
            return [
                (
                    "sliding" if i >= first_sliding else "full",
                    window if i >= first_sliding else None,
                )
                for i in range(n)
            ]
        return [("sliding", window)] * n

    def _llama4_mixers(self, n: int) -> list[tuple[str, int | None]]:
        """Llama-4: layers with RoPE attend in chunks of attention_chunk_size; no_rope_layers[i]
        == 0 marks a global NoPE layer (default every 4th: configuration_llama4.py)."""
        chunk = self.r.get_int("attention_chunk_size", minimum=1)
        flags = self.r.raw("no_rope_layers")
        if not (isinstance(flags, list) and len(flags) == n):
            interval = self.r.get_int("no_rope_layer_interval", minimum=1) or 4
            flags = [int((i + 1) % interval != 0) for i in range(n)]
        return [("chunked", chunk) if f and chunk else ("full", None) for f in flags]

    # -- one layer ----------------------------------------------------------------------

    def _attention_fields(self, mixer: str, i: int) -> dict:
        att = self.att
        if att is None:
            return {}
        heads, kv, hd, v = (
            att.num_heads,
            att.num_kv_heads,
            att.head_dim,
            att.v_head_dim or att.head_dim,
        )
        r = self.r
        if mixer == "sliding" and r.raw("swa_num_attention_heads") is not None:  # MiMo-V2-Flash
            heads = r.get_int("swa_num_attention_heads", minimum=1) or heads
            kv = r.get_int("swa_num_key_value_heads", minimum=1) or kv
            hd = r.get_int("swa_head_dim", minimum=1) or hd
            v = r.get_int("swa_v_head_dim", minimum=1) or hd
        gate = (
            bool(r.raw("attn_output_gate"))
            if r.raw("attn_output_gate") is not None
            else self.model_type.startswith(("qwen3_next", "qwen3_5"))
        )
        return dict(num_heads=heads, num_kv_heads=kv, head_dim=hd, v_head_dim=v, q_gate=gate)

    def _state(self, mixer: str) -> StateSpec | None:
        r, h = self.r, self.hidden
        if mixer == "linear" and self.model_type.startswith("minimax"):
            heads = self.att.num_heads if self.att else 0
            return StateSpec(
                "lightning", num_heads=heads, head_dim=self.att.head_dim if self.att else 0
            )
        if mixer == "linear":
            return StateSpec(
                "gdn",
                num_heads=r.get_int("linear_num_value_heads", minimum=1) or 0,
                head_dim=r.get_int("linear_value_head_dim", minimum=1) or 0,
                num_k_heads=r.get_int("linear_num_key_heads", minimum=1) or 0,
                k_head_dim=r.get_int("linear_key_head_dim", minimum=1) or 0,
                conv_kernel=r.get_int("linear_conv_kernel_dim", minimum=1) or 4,
            )
        if mixer != "mamba":
            return None
        if r.raw("mamba_dt_rank") is not None or self.model_type == "jamba":  # Mamba-1
            expand = r.get_int("mamba_expand", minimum=1) or 2
            dt_rank = r.raw("mamba_dt_rank")
            dt_rank = (
                math.ceil(h / 16)
                if dt_rank in (None, "auto")
                else r.get_int("mamba_dt_rank", minimum=1) or 0
            )
            return StateSpec(
                "mamba1",
                state_size=r.get_int("mamba_d_state", minimum=1) or 16,
                conv_kernel=r.get_int("mamba_d_conv", minimum=1) or 4,
                intermediate=expand * h,
                dt_rank=dt_rank,
            )
        heads = r.get_int("mamba_num_heads", "mamba_n_heads", minimum=1) or 0
        head_dim = r.get_int("mamba_head_dim", "mamba_d_head", minimum=1) or 0
        inner = r.get_int("mamba_d_ssm", minimum=1) or heads * head_dim
        if not heads or not head_dim:
            self.unknown.append(
                "Mamba layers without mamba_num_heads / mamba_head_dim: their size is unknown"
            )
        return StateSpec(
            "mamba2",
            num_heads=heads,
            head_dim=head_dim,
            intermediate=inner,
            state_size=r.get_int("ssm_state_size", "mamba_d_state", minimum=1) or 128,
            n_groups=r.get_int("n_groups", "mamba_n_groups", minimum=1) or 1,
            conv_kernel=r.get_int("conv_kernel", "mamba_d_conv", minimum=1) or 4,
        )

    def _layer(self, i: int, mixer: str, window: int | None) -> LayerSpec:
        fields: dict = {"mixer": mixer, "window": window}
        if mixer in ("full", "sliding", "chunked"):
            fields.update(self._attention_fields(mixer, i))
        state = self._state(mixer)
        if state is None and self.model_type.startswith("falcon_h1"):
            state = self._state(
                "mamba"
            )  # Falcon-H1: attention and Mamba-2 in parallel in every layer
        fields["state"] = state
        fields.update(self._mlp(i))
        return LayerSpec(**fields)

    def _mlp(self, i: int) -> dict:
        r, moe = self.r, self.moe
        dense_inter = (
            r.get_int("intermediate_size_mlp", minimum=1) or self.inter
        )  # Llama-4 dense layers
        gated = (
            str(r.raw("mlp_hidden_act") or r.raw("hidden_act") or "silu") not in ("relu2",)
            and self.model_type not in UNGATED_MLP_TYPES
        )
        if self.model_type.startswith("granitemoehybrid") and (moe is None or not moe.num_experts):
            # Granite 4 dense: the shared MLP is the layer's MLP (granitemoehybrid.py shared_mlp)
            dense_inter = r.get_int("shared_intermediate_size", minimum=1) or dense_inter
        if moe is None or not self._is_moe_layer(i):
            return dict(mlp="dense", mlp_intermediate=dense_inter, gated_mlp=gated)
        return dict(mlp="moe", gated_mlp=gated, **self._moe_fields())

    def _moe_fields(self) -> dict:
        r, moe = self.r, self.moe
        ei = moe.expert_intermediate_size or self.inter
        shared = r.get_int(
            "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
            "shared_intermediate_size", minimum=0,
        )
        if shared is None:
            shared = moe.num_shared_experts * ei
        elif moe.num_shared_experts > 1 and r.raw("shared_expert_intermediate_size") is None:
            shared *= (
                moe.num_shared_experts
            )  # per-expert width times the count (Nemotron-H: one expert)
        if self.model_type.startswith("llama4"):
            shared = ei  # one shared expert of the routed width (llama4.py Llama4MoE.shared_expert)
        return dict(
            experts=moe.num_experts,
            experts_per_token=moe.experts_per_token,
            expert_intermediate=ei,
            shared_intermediate=shared,
            latent=r.get_int("moe_latent_size", minimum=1) or 0,
        )

    def _is_moe_layer(self, i: int) -> bool:
        r = self.r
        only_dense = r.raw("mlp_only_layers")
        if isinstance(only_dense, list) and i in only_dense:
            return False
        freq = r.raw("moe_layer_freq")
        if isinstance(freq, list):
            return i < len(freq) and bool(freq[i])
        step = r.get_int("interleave_moe_layer_step", minimum=0)
        if step is not None:
            return step > 0 and (i + 1) % step == 0
        start = r.get_int("moe_layer_start_index", minimum=0)
        if start is not None:  # ERNIE-4.5
            end = r.get_int("moe_layer_end_index", minimum=0)
            interval = r.get_int("moe_layer_interval", minimum=1) or 1
            return i >= start and (end is None or i <= end) and (i - start) % interval == 0
        period = r.get_int("expert_layer_period", minimum=1)
        if period:  # Jamba
            return i % period == (r.get_int("expert_layer_offset", minimum=0) or 0)
        first = r.get_int("first_k_dense_replace", minimum=0) or 0
        if i < first:
            return False
        every = r.get_int("moe_layer_freq", minimum=1) or 1
        sparse_step = r.get_int("decoder_sparse_step", minimum=1)
        if sparse_step:
            return (i + 1) % sparse_step == 0
        return (
            i % every == 0
        )  # deepseek_v2.py: layer_idx >= first_k_dense_replace and idx % freq == 0

    # -- families with one mixer per layer ----------------------------------------------

    def _single_mixer_blocks(self, kinds: list[str], key: str) -> tuple[LayerSpec, ...]:
        """Nemotron-H: each layer is one of mamba, attention, mlp, moe (a norm and one mixer)."""
        if len(kinds) > LIMITS["layers"]:
            raise ConfigValueError(f"{key} has {len(kinds):,} layers, beyond any real model")
        out = []
        gated = str(self.r.raw("mlp_hidden_act") or "relu2") != "relu2"
        for k in kinds:
            if k == "mamba":
                out.append(LayerSpec("mamba", state=self._state("mamba"), mlp="none"))
            elif k == "attention":
                out.append(LayerSpec("full", mlp="none", **self._attention_fields("full", 0)))
            elif k == "mlp":
                out.append(
                    LayerSpec("none", mlp="dense", mlp_intermediate=self.inter, gated_mlp=gated)
                )
            elif k == "moe" and self.moe is not None:
                out.append(LayerSpec("none", mlp="moe", gated_mlp=gated, **self._moe_fields()))
            else:
                self.unknown.append(f"{key} holds {k!r}, a block kind servepilot does not know")
                out.append(LayerSpec("none", mlp="none"))
        return tuple(out)

    def _nas_blocks(self, configs: list) -> tuple[LayerSpec, ...]:
        """DeciLM / Llama-Nemotron NAS: per layer attention and FFN, each possibly removed."""
        if len(configs) > LIMITS["layers"]:
            raise ConfigValueError(
                f"block_configs has {len(configs):,} layers, beyond any real model"
            )
        out = []
        att = self.att
        for i, block in enumerate(configs):
            block = block if isinstance(block, dict) else {}
            a = block.get("attention") if isinstance(block.get("attention"), dict) else {}
            f = block.get("ffn") if isinstance(block.get("ffn"), dict) else {}
            fields: dict = {}
            if a.get("no_op"):
                fields["mixer"] = "none"
            elif a.get("replace_with_linear"):
                fields["mixer"] = "linear_proj"
            else:
                group = check_count(
                    f"block_configs[{i}].attention.n_heads_in_group",
                    a.get("n_heads_in_group"),
                    minimum=1,
                    limit="heads",
                )
                heads = att.num_heads if att else 0
                if group is None or not heads:
                    self.unknown.append(f"block_configs[{i}]: attention without n_heads_in_group")
                    group = 1
                fields.update(
                    mixer="full",
                    num_heads=heads,
                    num_kv_heads=max(1, heads // group),
                    head_dim=att.head_dim if att else 0,
                    v_head_dim=att.head_dim if att else 0,
                )
            if f.get("no_op"):
                fields["mlp"] = "none"
            elif f.get("replace_with_linear"):
                fields["mlp"] = "linear_proj"
            else:
                mult = f.get("ffn_mult")
                if (
                    isinstance(mult, bool)
                    or not isinstance(mult, int | float)
                    or not math.isfinite(mult)
                    or mult <= 0
                ):
                    raise ConfigValueError(
                        f"block_configs[{i}].ffn.ffn_mult is {mult!r}, not a positive number"
                    )
                fields.update(
                    mlp="dense", mlp_intermediate=ffn_mult_to_intermediate(mult, self.hidden)
                )
            out.append(LayerSpec(**fields))
        return tuple(out)
