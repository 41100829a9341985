"""LoRA adapter slots in the memory fit, against a hand computation for Llama-3-8B.

vLLM 0.34.0 allocates each slot at ``--max-lora-rank`` for every module LoRA supports (see
:func:`eks_inference.catalog.sizing.lora_slot_bytes`); the numbers below are the model's
``config.json`` (hidden 4096, MLP 14336, 32 heads of 128, 8 KV heads, 32 layers, vocabulary
128256, bfloat16) worked through module by module.
"""

from __future__ import annotations

from eks_inference.catalog import INSTANCE_TYPES, MODELS, sizing

LLAMA = MODELS["llama-3-8b"].architecture
L40S = INSTANCE_TYPES["g6e.2xlarge"]


def test_the_catalog_shape_of_llama_3_8b_adds_up_to_its_parameter_count() -> None:
    """The MLP width the slots are sized with is the one the model has: the parameters of
    embeddings, attention, MLP and norms add up to the checkpoint's count."""
    hidden, inner, vocab = 4096, 14336, 128256
    assert (LLAMA.hidden_size, LLAMA.intermediate_size, LLAMA.vocab_size) == (hidden, inner, vocab)
    attention = hidden * hidden * 2 + hidden * 1024 * 2  # q, o; k, v of 8 KV heads of 128
    mlp = 3 * hidden * inner
    norms = 2 * hidden
    total = 32 * (attention + mlp + norms) + 2 * vocab * hidden + hidden
    assert total == LLAMA.num_parameters == 8_030_261_248


def test_one_slot_of_rank_16_on_one_gpu_by_hand() -> None:
    r, hidden, inner, vocab = 16, 4096, 14336, 128256
    q, kv = 32 * 128, 8 * 128
    per_layer = (
        # qkv_proj: A (r x hidden) per slice q, k, v; B (q + k + v outputs x r)
        3 * r * hidden
        + (q + 2 * kv) * r
        # o_proj: A (r x q), B (hidden x r)
        + r * q
        + hidden * r
        # gate_up_proj: A per slice gate, up; B (2 x inner x r)
        + 2 * r * hidden
        + 2 * inner * r
        # down_proj: A (r x inner), B (hidden x r)
        + r * inner
        + hidden * r
    )
    # embed_tokens: A (vocab x r), B (hidden x r); lm_head: A (r x hidden), B (vocab x r).
    embeddings = vocab * r + hidden * r + r * hidden + vocab * r
    by_hand = (32 * per_layer + embeddings) * 2  # bfloat16
    assert by_hand == 92_356_608  # 88.1 MiB
    assert sizing.lora_slot_bytes(LLAMA, L40S, 1, 16) == by_hand


def test_slots_scale_with_rank_and_count_and_come_out_of_the_kv_cache() -> None:
    slot = sizing.lora_slot_bytes(LLAMA, L40S, 1, 16)
    assert sizing.lora_slot_bytes(LLAMA, L40S, 1, 64) == 4 * slot
    bare = sizing.memory_fit(LLAMA, L40S, 1, 4096, 32, 0.9)
    fit = sizing.memory_fit(LLAMA, L40S, 1, 4096, 32, 0.9, 4 * slot)
    assert fit.adapter_bytes == 369_426_432
    assert fit.required_bytes == bare.required_bytes + 4 * slot
    assert fit.kv_room_bytes == bare.kv_room_bytes - 4 * slot
    # 27,139,477,504 bytes beside the weights on one L40S at 0.9; 131,072 bytes of KV a token.
    assert bare.kv_room_bytes == 43_200_000_000 - 16_060_522_496
    assert fit.kv_room_bytes // sizing.kv_cache_bytes_per_token(LLAMA) == 204_239
    seqs = sizing.max_num_seqs_that_fit(LLAMA, L40S, 1, 4096, 0.9, 4 * slot)
    assert seqs == fit.kv_room_bytes // (4096 * 131_072) == 49


def test_tensor_parallel_slots_repeat_what_every_rank_holds_whole() -> None:
    """Over 4 GPUs the column-parallel A, row-parallel B and the embeddings are whole on every
    rank; the rest is split: the group holds more than one GPU does."""
    g6e12 = INSTANCE_TYPES["g6e.12xlarge"]
    r, hidden, inner, vocab = 16, 4096, 14336, 128256
    per_layer = (
        4 * 3 * r * hidden
        + (4096 + 2 * 1024) * r
        + r * 4096
        + 4 * hidden * r
        + 4 * 2 * r * hidden
        + 2 * inner * r
        + r * inner
        + 4 * hidden * r
    )
    embeddings = 4 * 2 * r * (vocab + hidden)
    assert sizing.lora_slot_bytes(LLAMA, g6e12, 4, r) == (32 * per_layer + embeddings) * 2
