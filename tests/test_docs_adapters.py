"""The figures of ``docs/lora-adapters.md`` are the library's own: the sizing table there is
exactly what :func:`adapter_table` computes with :mod:`eks_inference.catalog.sizing` for the
reference platform's GPU models."""

from __future__ import annotations

from eks_inference.catalog import INSTANCE_TYPES, MODELS, ModelArchitecture, sizing
from tests.helpers.platforms import REPO

PAGE = REPO / "docs" / "lora-adapters.md"
INSTANCE = "g6e.2xlarge"
MODELS_SHOWN = ("llama-3-8b", "mistral-7b", "qwen2.5-7b")
MAX_MODEL_LEN, MAX_NUM_SEQS, UTILIZATION = 4096, 32, 0.9
FINE_TUNES = 3


def adapter_table() -> list[str]:
    """Per reference model on one L40S at the default limits: the weights, what one slot of
    rank 16 and four slots of rank 16 and 64 take, the KV tokens left, and what three
    fine-tunes cost an hour as three deployments and as one with adapters."""
    instance = INSTANCE_TYPES[INSTANCE]
    rows = [
        "| model | weights GiB | 1 slot r16 GiB | KV tokens, no adapters | 4 slots r16: GiB, "
        "KV tokens left | 4 slots r64: GiB, KV tokens left | 3 deployments $/h | 1 deployment "
        "with 3 adapters $/h |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in MODELS_SHOWN:
        arch = MODELS[name].architecture

        def tokens(adapter_bytes: int, arch: ModelArchitecture = arch) -> int:
            fit = sizing.memory_fit(
                arch, instance, 1, MAX_MODEL_LEN, MAX_NUM_SEQS, UTILIZATION, adapter_bytes
            )
            return fit.kv_room_bytes // sizing.kv_cache_bytes_per_token(arch)

        slot16 = sizing.lora_slot_bytes(arch, instance, 1, 16)
        slot64 = sizing.lora_slot_bytes(arch, instance, 1, 64)
        price = instance.price_per_hour
        rows.append(
            f"| {name} | {sizing.gib(sizing.weight_bytes(arch)):.1f} | "
            f"{sizing.gib(slot16):.3f} | {tokens(0):,} | "
            f"{sizing.gib(4 * slot16):.2f}, {tokens(4 * slot16):,} | "
            f"{sizing.gib(4 * slot64):.2f}, {tokens(4 * slot64):,} | "
            f"{FINE_TUNES * price:.2f} | {price:.2f} |"
        )
    return rows


def test_the_page_shows_the_librarys_figures() -> None:
    page = PAGE.read_text()
    for row in adapter_table():
        assert row in page, row


def test_the_pages_slot_computation_ends_in_the_librarys_figure() -> None:
    llama = MODELS["llama-3-8b"].architecture
    slot = sizing.lora_slot_bytes(llama, INSTANCE_TYPES[INSTANCE], 1, 16)
    parameters = slot // 2  # bfloat16
    line = f"= {parameters:,} parameters x 2 bytes = {slot:,} bytes ({slot / 2**20:.1f} MiB)"
    assert line in PAGE.read_text()
