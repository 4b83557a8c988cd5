"""Mode `temporal`: memory-based temporal GNN link prediction (see gnnsys.temporal)."""
from __future__ import annotations


def fit(config) -> dict:
    from ..temporal import fit as temporal_fit
    return temporal_fit(config)
