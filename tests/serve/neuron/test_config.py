"""The application's arguments (``ServerConfig``) beyond what ``build_app``'s tests cover."""

from __future__ import annotations

from eks_inference.serve.neuron.config import ServerConfig
from tests.helpers.serve_fakes import APP_ARGS as ARGS


def test_additional_config_without_overrides_is_accepted() -> None:
    assert ServerConfig.model_validate({**ARGS, "additional_config": {}}).additional_config == {}


def test_one_block_per_sequence_is_the_contiguous_kv_cache_without_prefix_caching() -> None:
    config = ServerConfig.model_validate({**ARGS, "block_size": ARGS["max_model_len"]})
    assert config.kv_cache_settings() == {
        "enable_prefix_caching": False,
        "num_gpu_blocks_override": ARGS["max_num_seqs"],
    }


def test_smaller_blocks_are_the_paged_kv_cache_with_prefix_caching() -> None:
    assert ServerConfig.model_validate(ARGS).kv_cache_settings() == {"enable_prefix_caching": True}
