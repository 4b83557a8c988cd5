"""DGL 2.1's minibatch link-prediction loop on a gnnsys training graph: the peer side of
`bench_link_epoch.py`. It runs in the DGL virtual environment
(`scripts/setup_dgl_baseline.sh`), not gnnsys's, so it imports neither gnnsys nor harness.

The loop is DGL's own example (examples/pytorch/graphsage/link_pred.py): DGL's
NeighborSampler wrapped by `as_edge_prediction_sampler` with a uniform negative sampler
(`negative_sampler.Uniform(1)`: one (u, w) per positive (u, v), w uniform), DGL's
DataLoader over the positive edges' ids (features prefetched by the sampler), SAGEConv
mean layers with ReLU and dropout between them, a predictor over h_u * h_v, Adam, and
binary cross-entropy on positives and negatives. Two choices follow gnnsys's side so both
do the same work: no edge is excluded from message passing (the example excludes each
batch's edges and their reverses, which PyG's default does not and gnnsys's link mode
does not), and the predictor is gnnsys's `mlp` decoder (Linear, ReLU, dropout, Linear)
with the loss gnnsys's (the positives' mean BCE plus the negatives'); the example's has a
third Linear. The graph is the .npy arrays gnnsys trains on (indptr, indices of the
training graph, x, and the positive pairs each epoch takes, `pairs_<epoch>.npy`),
memory-mapped, never unpickled.

Prints one JSON object: per-epoch seconds, steps and loss, peak RSS and the versions.
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import dgl
import dgl.nn as dglnn
from dgl.dataloading import (DataLoader, NeighborSampler, as_edge_prediction_sampler,
                             negative_sampler)


class Model(nn.Module):
    def __init__(self, in_size: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        dims = [in_size] + [hidden] * layers
        self.layers = nn.ModuleList(dglnn.SAGEConv(dims[i], dims[i + 1], "mean")
                                    for i in range(layers))
        self.hidden, self.out = nn.Linear(hidden, hidden), nn.Linear(hidden, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h

    def predict(self, h_src, h_dst):
        return self.out(self.dropout(F.relu(self.hidden(h_src * h_dst)))).squeeze(-1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arrays", required=True,
                    help="JSON {name: .npy path} for indptr, indices, x and pairs_0, pairs_1, ...")
    ap.add_argument("--fanouts", type=int, nargs="+", required=True, help="seed outward")
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--dropout", type=float, required=True)
    ap.add_argument("--batch-size", type=int, required=True, help="positive edges per batch")
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dgl.seed(args.seed)
    arrays = json.loads(args.arrays)
    load = lambda name: np.load(arrays[name], mmap_mode="r", allow_pickle=False)  # noqa: E731

    start = time.perf_counter()
    indptr = torch.from_numpy(np.asarray(load("indptr"), dtype=np.int64))
    indices = torch.from_numpy(np.asarray(load("indices"), dtype=np.int64))
    g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.int64))))
    g.ndata["feat"] = torch.from_numpy(np.array(load("x"), dtype=np.float32))
    load_s = time.perf_counter() - start
    model = Model(g.ndata["feat"].shape[1], args.hidden, len(args.fanouts), args.dropout)
    sampler = as_edge_prediction_sampler(
        NeighborSampler(list(reversed(args.fanouts)), prefetch_node_feats=["feat"]),
        negative_sampler=negative_sampler.Uniform(1))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    epochs = []
    for epoch in range(args.epochs):
        pairs = torch.from_numpy(np.asarray(load(f"pairs_{epoch}"), dtype=np.int64))
        edge_ids = g.edge_ids(pairs[0], pairs[1])
        loader = DataLoader(g, edge_ids, sampler, batch_size=args.batch_size, shuffle=True,
                            drop_last=False, num_workers=0)
        model.train()
        start, loss_sum, steps = time.perf_counter(), 0.0, 0
        for input_nodes, pair_graph, neg_pair_graph, blocks in loader:
            h = model(blocks, blocks[0].srcdata["feat"])
            pos_src, pos_dst = pair_graph.edges()
            neg_src, neg_dst = neg_pair_graph.edges()
            pos = model.predict(h[pos_src], h[pos_dst])
            neg = model.predict(h[neg_src], h[neg_dst])
            loss = (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos))
                    + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += float(loss) * len(pos)
            steps += 1
        epochs.append({"epoch_s": time.perf_counter() - start, "steps": steps,
                       "loss": loss_sum / max(len(edge_ids), 1)})
        print(f"dgl epoch {epoch + 1}: {epochs[-1]['epoch_s']:.1f} s", file=sys.stderr, flush=True)
    print(json.dumps({"epochs": epochs, "load_s": load_s,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "versions": {"dgl": dgl.__version__, "torch": torch.__version__},
                      "pid": os.getpid()}))


if __name__ == "__main__":
    main()
