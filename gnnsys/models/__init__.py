"""GNN models over sampled blocks (GraphSAGE, GCN, GAT), built from PyG layers."""
from .block_gnn import BlockGNN, build_model

__all__ = ["BlockGNN", "build_model"]
