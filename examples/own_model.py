"""A model of your own, trained by gnnsys: each layer a two-layer MLP over [a node's own
row, the mean of its sampled neighbours' rows] (SAGE adds two linear maps of those; this
mixes them nonlinearly). README, "Your own model".

It subclasses `BlockGNN`, which gives a stack of per-block layers the rest of the model
contract (`from_config`, `forward`, layer-wise `inference`, `step_elements`; docs/CODEMAP.md,
"The model contract"): the class gives each layer's module (`make_conv`) and what it
computes over a block (`aggregate`).

    model:
      arch: examples.own_model:NeighbourMeanMLP   # from the checkout's root (PYTHONPATH=.)

    gnnsys.Trainer(cfg, model_class=NeighbourMeanMLP).fit()

    python examples/own_model.py      # trains it on a small synthetic graph
"""
import torch
from torch import nn

from gnnsys.models.block_gnn import BlockGNN
from gnnsys.sparse_features import is_sparse


class NeighbourMeanMLP(BlockGNN):

    def make_conv(self, in_dim, out_dim, heads, last):
        """Layer i's module: [own row, neighbour mean] -> mid -> ReLU -> out_dim, mid as
        wide as the layer's output, but in the last layer as its input (not the classes)."""
        mid = in_dim if last else out_dim
        return nn.Sequential(nn.Linear(2 * in_dim, mid), nn.ReLU(), nn.Linear(mid, out_dim))

    def aggregate(self, i, x, edge_index, num_dst, n_id, x_agg):
        """The block's targets' outputs: x holds its sources' rows, targets first;
        edge_index is (source, target) in local ids."""
        if is_sparse(x):                 # bag-of-words inputs kept sparse: densify here
            x = x.to_dense()
        src, dst = edge_index
        total = torch.zeros(num_dst, x.shape[1], dtype=x.dtype, device=x.device)
        total.index_add_(0, dst, x[src])
        count = torch.bincount(dst, minlength=num_dst).clamp(min=1).unsqueeze(1)
        return self.convs[i](torch.cat([x[:num_dst], total / count], dim=1))

    def layer_elements(self, i, block, wide_in, wide_out, csr):
        """The step's memory (gnnsys refuses a step that cannot fit): a source row per
        sampled edge, then per target its mean, [row, mean] and the MLP's two outputs."""
        mid = self.convs[i][0].out_features
        return (block.edge_index.shape[1] * wide_in
                + block.num_dst * (3 * wide_in + mid + wide_out))


if __name__ == "__main__":
    import gnnsys
    # the class by its module's name, not this script's (__main__), so that a Ray worker
    # or a later load_run can import it again
    from own_model import NeighbourMeanMLP as Model

    config = {"dataset": {"name": "synthetic-tiny"}, "model": {"hidden": 32},
              "sampler": {"fanouts": [10, 5]}, "train": {"epochs": 3, "lr": 0.01},
              "run": {"dir": "runs/own-model"}}
    result = gnnsys.Trainer(config, model_class=Model).fit()
    print(result.config.model.arch, "test_acc", round(result["test_acc"], 3))
    print(gnnsys.load_run(result.run_dir).model)
