"""Mode `minibatch`: GraphSAGE / GCN / GAT on sampled neighbourhoods, 1 or K workers
(SALIENT++ feature partitioning with a VIP cache, HyDRA-style fused sample+gather).

batch.py      MiniBatch / Block: what the models consume
loader.py     the fused sampler for `sampler.device`, NodeLoader (background batch prep)
store/        a worker's FeatureStore: own rows in VIP order + cached remote rows + fetch
inference.py  exact layer-wise inference over partitioned features (halo exchange)
mode.py       the plug-in `gnnsys.training` runs
"""
from .batch import Block, MiniBatch

__all__ = ["Block", "MiniBatch"]
