"""Fixtures of the Neuron application's tests: the NeuronCores Ray assigns to a replica."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import ray


@dataclass
class FakeRuntimeContext:
    neuron_cores: list[str]

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        return {"GPU": [], "neuron_cores": self.neuron_cores}


@pytest.fixture
def assigned_cores(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cores Ray assigns to the replica; the environment is restored afterwards."""
    cores: list[str] = []
    monkeypatch.setattr(ray, "get_runtime_context", lambda: FakeRuntimeContext(cores))
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "restored-after-test")
    return cores
