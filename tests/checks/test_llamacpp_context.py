"""SP-LEN-002: a llama.cpp context beyond the GGUF's training context."""

import json

import numpy as np
import pytest

from servepilot.cli.main import main


def _gguf(path, context_length):
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(context_length)
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_feed_forward_length(128)
    w.add_tensor("token_embd.weight", np.zeros((256, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("ctx, expect", [(8192, True), (4096, False), (2048, False)])
def test_context_beyond_training_length_is_a_warning(tmp_path, capsys, ctx, expect):
    model = _gguf(tmp_path / "tiny.gguf", 4096)
    rc = main(["check", "--json", "--gpu", "t4", "--", "llama-server", "-m", str(model), "-c", str(ctx)])
    obj = json.loads(capsys.readouterr().out)
    found = [f for f in obj["findings"] if f["code"] == "SP-LEN-002"]
    assert bool(found) is expect
    assert rc == 0  # llama.cpp starts either way
    if expect:
        assert found[0]["severity"] == "warning" and found[0]["category"] == "max_model_len"
        assert found[0]["remedies"][0]["args"] == {"set": {"ctx_size": 4096}, "unset": []}


def test_llamacpp_has_no_attention_line(tmp_path, capsys):
    model = _gguf(tmp_path / "tiny.gguf", 4096)
    main(["check", "--gpu", "t4", "--", "llama-server", "-m", str(model), "-c", "2048"])
    out = capsys.readouterr().out
    assert "none valid" not in out
    assert not any(line.strip().startswith("attention") for line in out.splitlines())
