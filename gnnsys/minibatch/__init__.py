"""Mode `minibatch`: GraphSAGE / GCN / GAT on sampled neighbourhoods (SALIENT++, HyDRA)."""
from .single import fit

__all__ = ["fit"]
