"""Every config the repository ships loads, validates and names a registered dataset, so a
command copied from the README, BENCHMARKS.md or a script never fails on its config."""
from pathlib import Path

import pytest

from gnnsys.config import load_config
from gnnsys.datasets.registry import registry

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_configs_are_found():
    assert len(CONFIGS) >= 10


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_is_valid(path):
    cfg = load_config(path)
    assert cfg.dataset.name in registry(), f"{path.name}: unknown dataset {cfg.dataset.name}"
