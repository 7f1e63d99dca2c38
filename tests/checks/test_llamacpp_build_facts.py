"""SP-GGUF-001/002/003: a GGUF's architecture, pre-tokenizer and tensor types against the
llama.cpp build that loads it (engines/llamacpp/knowledge/build_facts.json)."""

import json

import numpy as np
import pytest

from servepilot.cli.main import main
from servepilot.engines.llamacpp import build_facts


def _gguf(path, arch="llama", pre=None, tensor_type=None):
    """A tiny real GGUF: one F32 tensor, optionally a BPE vocabulary with a pre-tokenizer and
    one tensor of a quantized type (raw bytes of one block)."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_feed_forward_length(128)
    if pre is not None:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
    w.add_tensor("token_embd.weight", np.zeros((256, 64), dtype=np.float32))
    if tensor_type is not None:
        qtype = gguf.GGMLQuantizationType[tensor_type]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        w.add_tensor("output.weight", np.zeros((1, size), dtype=np.uint8), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _check(capsys, model, *version, program=("llama-server", "-m")):
    args = ["check", "--json", "--gpu", "h100"]
    if version:
        args += ["--engine-version", version[0]]
    rc = main(args + ["--", *program, str(model), "-c", "2048"])
    return rc, json.loads(capsys.readouterr().out)


def _codes(obj, code):
    return [f for f in obj["findings"] if f["code"] == code]


def _first_build(kind, name) -> int:
    return build_facts.facts()["llama_cpp"][kind][name]["first"]


def _build_before(first: int) -> int:
    keys = [s["key"] for s in build_facts.facts()["llama_cpp"]["snapshots"]]
    return max(k for k in keys if k < first)


def test_architecture_a_build_does_not_know_fails_and_a_later_build_passes(tmp_path, capsys):
    model = _gguf(tmp_path / "g.gguf", arch="gemma3")
    first = _first_build("architectures", "gemma3")
    rc, obj = _check(capsys, model, str(_build_before(first)))
    found = _codes(obj, "SP-GGUF-001")
    assert rc == 1 and obj["verdict"] == "fail"
    assert found and found[0]["category"] == "unsupported_arch" and found[0]["severity"] == "error"
    assert "unknown model architecture: 'gemma3'" in found[0]["detail"]
    assert found[0]["remedies"][0]["args"] == {
        "upgrade": {"package": "llama.cpp", "specifier": f">={first}"}
    }
    rc, obj = _check(capsys, model, str(first))
    assert rc == 0 and not _codes(obj, "SP-GGUF-001") and not obj["unknowns"]


def test_pre_tokenizer_a_build_does_not_know_fails_and_a_later_build_passes(tmp_path, capsys):
    model = _gguf(tmp_path / "p.gguf", pre="gpt-4o")
    first = _first_build("pre_tokenizers", "gpt-4o")
    rc, obj = _check(capsys, model, f"b{_build_before(first)}")  # the release tag's spelling
    found = _codes(obj, "SP-GGUF-002")
    assert rc == 1 and found and found[0]["category"] == "tokenizer_template"
    assert "unknown pre-tokenizer type: 'gpt-4o'" in found[0]["detail"]
    rc, obj = _check(capsys, model, str(first))
    assert rc == 0 and not _codes(obj, "SP-GGUF-002")


def test_pre_tokenizer_is_ignored_without_a_bpe_vocabulary_and_by_builds_before_the_check(
    tmp_path, capsys
):
    oldest = build_facts.facts()["llama_cpp"]["snapshots"][0]
    assert oldest["checks_pre_tokenizer"] is False  # b1492 did not compare the names yet
    model = _gguf(tmp_path / "p.gguf", pre="no-such-pre-tokenizer")
    rc, obj = _check(capsys, model, str(oldest["key"]))
    assert not _codes(obj, "SP-GGUF-002")
    rc, obj = _check(capsys, model, str(build_facts.facts()["llama_cpp"]["snapshots"][-1]["key"]))
    assert rc == 1 and _codes(obj, "SP-GGUF-002")


def test_tensor_type_a_build_does_not_know_fails_and_a_later_build_passes(tmp_path, capsys):
    model = _gguf(tmp_path / "q.gguf", tensor_type="MXFP4")
    first = _first_build("ggml_types", "MXFP4")
    rc, obj = _check(capsys, model, str(_build_before(first)))
    found = _codes(obj, "SP-GGUF-003")
    assert rc == 1 and found and found[0]["category"] == "quantization_support"
    assert "'MXFP4'" in found[0]["title"]
    rc, obj = _check(capsys, model, str(first))
    assert rc == 0 and not _codes(obj, "SP-GGUF-003")


def test_llama_cpp_python_server_is_judged_by_its_own_release(tmp_path, capsys):
    model = _gguf(tmp_path / "g.gguf", arch="gemma3")
    table = build_facts.facts()["llama_cpp_python"]
    first = table["architectures"]["gemma3"]["first"]
    versions = [s["key"] for s in table["snapshots"]]
    before = versions[versions.index(first) - 1]
    program = ("python", "-m", "llama_cpp.server", "--model")
    rc, obj = _check(capsys, model, before, program=program)
    found = _codes(obj, "SP-GGUF-001")
    assert rc == 1 and found
    assert found[0]["remedies"][0]["change"] == f"pip install 'llama-cpp-python>={first}'"
    rc, obj = _check(capsys, model, first, program=program)
    assert rc == 0 and not _codes(obj, "SP-GGUF-001")


@pytest.mark.parametrize(
    "version, why",
    [
        (None, "no llama.cpp build was given"),
        ("99999", "outside the builds read"),
    ],
)
def test_a_build_that_cannot_be_placed_is_a_named_unknown_not_a_pass(
    tmp_path, capsys, version, why
):
    model = _gguf(tmp_path / "g.gguf", arch="gemma3")
    rc, obj = _check(capsys, model, *([version] if version else []))
    assert rc == 4 and obj["verdict"] == "unknown"
    unknown = [u for u in obj["unknowns"] if u["fact"] == "llama.cpp architecture support"]
    assert unknown and why in unknown[0]["why"] and "gemma3" in unknown[0]["why"]
    assert "--engine-version" in unknown[0]["settle"]
    assert not _codes(obj, "SP-GGUF-001")


def test_a_build_between_two_reads_that_disagree_is_unknown(tmp_path, capsys):
    model = _gguf(tmp_path / "g.gguf", arch="gemma3")
    first = _first_build("architectures", "gemma3")
    between = _build_before(first) + 1
    assert between < first
    rc, obj = _check(capsys, model, str(between))
    assert rc == 4
    assert any("disagree" in u["why"] for u in obj["unknowns"])


def test_an_architecture_every_build_read_knows_passes_without_a_build(tmp_path, capsys):
    model = _gguf(tmp_path / "l.gguf", arch="llama")
    rc, obj = _check(capsys, model)
    assert rc == 0 and obj["verdict"] == "pass" and not obj["unknowns"]


def test_an_architecture_no_build_knows_fails_inside_the_read_range(tmp_path, capsys):
    model = _gguf(tmp_path / "m.gguf", arch="mio-embedding")
    rc, obj = _check(capsys, model, str(build_facts.facts()["llama_cpp"]["snapshots"][-1]["key"]))
    found = _codes(obj, "SP-GGUF-001")
    assert rc == 1 and found and "in no build read" in found[0]["detail"]


@pytest.mark.parametrize(
    "program, version, expect",
    [
        ("llama-server", "5061", ("llama_cpp", 5061)),
        ("llama-server", "b5061", ("llama_cpp", 5061)),
        ("llama-server", "5061 (916c83bf)", ("llama_cpp", 5061)),
        ("llama-server", "0.3.8", None),
        ("llama-server", None, None),
        ("python -m llama_cpp.server", "0.3.8", ("llama_cpp_python", "0.3.8")),
        ("python -m llama_cpp.server", "not-a-version", None),
    ],
)
def test_build_of_reads_build_numbers_and_llama_cpp_python_releases(program, version, expect):
    build = build_facts.build_of(program, version)
    if expect is None:
        assert build is None
    else:
        assert (build.table, str(build.key)) == (expect[0], str(expect[1]))


def test_every_fact_names_a_source_and_a_snapshot_read():
    data = build_facts.facts()
    for table in ("llama_cpp", "llama_cpp_python"):
        keys = [s["key"] for s in data[table]["snapshots"]]
        assert len(keys) >= 10 and keys == sorted(keys, key=lambda k: build_facts._key(table, k))
        for kind in ("architectures", "pre_tokenizers", "ggml_types"):
            for name, row in data[table][kind].items():
                assert row["first"] in keys and row["last"] in keys, name
                assert row["source"], name
