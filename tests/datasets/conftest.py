"""Fixtures for the dataset tests: an isolated data root and the shared bundle directory."""
from pathlib import Path

import pytest

from gnnsys.datasets import bundles
from gnnsys.testing import shared_data_dir


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    """An empty data root that no environment variable can override."""
    monkeypatch.delenv("GNNSYS_DATA", raising=False)
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def no_bundles(monkeypatch, tmp_path):
    """Hide every bundle location, so bundle datasets count as missing."""
    monkeypatch.delenv(bundles.SHARED_DATA_ENV, raising=False)
    monkeypatch.setattr(bundles, "CHECKOUT_SHARED_DATA", tmp_path / "no-shared-data")


__all__ = ["needs_shared_data", "shared_data_dir"]
needs_shared_data = pytest.mark.skipif(shared_data_dir() is None,
                                       reason="shared/data bundles are not present")
