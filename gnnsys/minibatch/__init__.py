"""Mode `minibatch`: GraphSAGE / GCN / GAT on sampled neighbourhoods, 1 or K workers
(SALIENT++ feature partitioning with a VIP cache, HyDRA-style fused sample+gather);
`mode.py` is the plug-in `gnnsys.training` runs (docs/CODEMAP.md maps the modules)."""
from .batch import Block, MiniBatch

__all__ = ["Block", "MiniBatch"]
