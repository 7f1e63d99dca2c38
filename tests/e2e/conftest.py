"""End-to-end fixtures: a tiny random-weight LLaMA GGUF written with the `gguf` package.

llama.cpp loads it in well under a second on a CPU: two layers, embedding 64, 259 tokens
(three specials and the 256 byte tokens of a SentencePiece-style "llama" vocabulary, which
is all llama.cpp's SPM tokenizer needs to encode any text).
"""

import importlib.util
import socket
import subprocess
import sys

import pytest
from patience import PATIENCE_S

N_EMBD, N_LAYER, N_HEAD, N_FF, N_CTX_TRAIN = 64, 2, 4, 128, 256

requires_llama_cpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed (pip install 'llama-cpp-python[server]'; CI installs it)",
)


def write_tiny_llama_gguf(path) -> None:
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("servepilot-tiny-random-llama")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def tensor(name, shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    n_vocab = len(tokens)
    tensor("token_embd.weight", (n_vocab, N_EMBD))
    tensor("output_norm.weight", (N_EMBD,))
    tensor("output.weight", (n_vocab, N_EMBD))
    for i in range(N_LAYER):
        tensor(f"blk.{i}.attn_norm.weight", (N_EMBD,))
        for proj in ("q", "k", "v", "output"):
            tensor(f"blk.{i}.attn_{proj}.weight", (N_EMBD, N_EMBD))
        tensor(f"blk.{i}.ffn_norm.weight", (N_EMBD,))
        tensor(f"blk.{i}.ffn_gate.weight", (N_FF, N_EMBD))
        tensor(f"blk.{i}.ffn_up.weight", (N_FF, N_EMBD))
        tensor(f"blk.{i}.ffn_down.weight", (N_EMBD, N_FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_tiny_llama_gguf(path)
    return path


@pytest.fixture
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def servepilot(*args: str, timeout: float = PATIENCE_S, **kw) -> subprocess.CompletedProcess:
    """Run the CLI as its own process, as an operator's new shell would."""
    return subprocess.run(
        [sys.executable, "-c", "from servepilot.cli.main import run; run()", *args],
        capture_output=True, text=True, timeout=timeout, **kw,
    )


def llama_server_argv(model, port) -> list[str]:
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--port", str(port), "--host", "127.0.0.1"]
