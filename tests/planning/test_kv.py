

def test_a_zero_page_is_bad_input_not_a_division_by_zero():
    import pytest

    from servepilot.errors import BadInput
    from servepilot.planning import kv as kvmod

    with pytest.raises(BadInput, match="attention geometry"):
        kvmod.capacity(types=("full",) * 2, window=None, bytes_per_token_per_layer=0, available_per_stage=[1 << 30],
                       block_size=16, max_model_len=4096, generation="v1", hybrid=False, max_num_batched_tokens=8192)
