"""JSON that Python's decoder refuses with a plain ValueError (not JSONDecodeError): an
integer of more than 4300 digits (CPython's int_max_str_digits guard, 3.11+). Every reader
must turn it into one typed error, exit 2, not a traceback."""

from __future__ import annotations

import json
import struct

import pytest

from servepilot.checkpoint.jsonfile import read_json_object
from servepilot.checkpoint.safetensors import read_safetensors_summary
from servepilot.cli.main import main
from servepilot.errors import CheckpointError, HeaderError

HUGE_INT = "1" + "0" * 5000


def _config_with_huge_int(path):
    path.write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": ' + HUGE_INT + "}")
    return path


def test_config_with_an_integer_too_long_to_convert_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        read_json_object(_config_with_huge_int(tmp_path / "config.json"))


def test_safetensors_header_with_an_integer_too_long_to_convert_is_a_header_error(tmp_path):
    header = ('{"w": {"dtype": "F16", "shape": [' + HUGE_INT + '], "data_offsets": [0, 2]}}').encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0")
    with pytest.raises(HeaderError, match="not JSON"):
        read_safetensors_summary(path)


def test_inspect_cli_says_one_line_and_exits_2(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    _config_with_huge_int(ckpt / "config.json")
    assert main(["inspect", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # the error line, and perhaps its hint


def test_json_of_the_huge_int_really_raises_a_plain_value_error():
    # Guard for the tests above: they only mean something while CPython keeps the limit.
    with pytest.raises(ValueError) as info:
        json.loads(HUGE_INT)
    assert not isinstance(info.value, json.JSONDecodeError)
