"""DGL 2.1's minibatch GNN loop on a gnnsys graph: the peer side of
`bench_epoch.py --peer dgl` (issue 34). It runs in the DGL virtual environment
(`scripts/setup_dgl_baseline.sh`), not gnnsys's, so it imports neither gnnsys nor harness.

The loop is DGL's own example (examples/pytorch/graphsage/node_classification.py): DGL's
NeighborSampler and DataLoader (features and labels prefetched by the sampler), SAGEConv
mean layers, ReLU and dropout between them, Adam, cross entropy; then its layer-wise
full-neighbour inference for test accuracy. `--arch gcn` / `gat` swap in DGL's GraphConv
(norm "both" over the block's own degrees, where gnnsys's GCN scales by the global ones)
and GATConv (hidden layers concatenate `--heads` heads, the last averages them, as
gnnsys's); the rest of the loop is the same. Settings come from the command line, fanouts
in gnnsys's order (seed outward; DGL's list runs input layer first, so it is reversed).
The graph is the .npy arrays gnnsys trains on (indptr, indices: each node's neighbours;
x, y, train_idx, test_idx), memory-mapped, never unpickled.

Prints one JSON object: per-epoch seconds, steps and loss, test accuracy, evaluation
seconds, peak RSS and the versions.
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
from dgl.dataloading import DataLoader, MultiLayerFullNeighborSampler, NeighborSampler


def make_conv(arch: str, in_dim: int, out_dim: int, heads: int, last: bool):
    if arch == "sage":
        return dglnn.SAGEConv(in_dim, out_dim, "mean")
    if arch == "gcn":
        return dglnn.GraphConv(in_dim, out_dim, norm="both", allow_zero_in_degree=True)
    return dglnn.GATConv(in_dim, out_dim if last else out_dim // heads, heads,
                         allow_zero_in_degree=True)


class Model(nn.Module):
    def __init__(self, arch: str, in_size: int, hidden: int, out_size: int, layers: int,
                 dropout: float, heads: int):
        super().__init__()
        dims = [in_size] + [hidden] * (layers - 1) + [out_size]
        self.arch = arch
        self.layers = nn.ModuleList(make_conv(arch, dims[i], dims[i + 1], heads,
                                              i == layers - 1) for i in range(layers))
        self.dropout = nn.Dropout(dropout)

    def apply_layer(self, i: int, block, h):
        h = self.layers[i](block, h)
        if self.arch == "gat":     # [n, heads, width]: hidden layers concatenate, the last averages
            h = h.mean(1) if i == len(self.layers) - 1 else h.flatten(1)
        if i != len(self.layers) - 1:
            h = self.dropout(F.relu(h))
        return h

    def forward(self, blocks, x):
        h = x
        for i, block in enumerate(blocks):
            h = self.apply_layer(i, block, h)
        return h

    @torch.no_grad()
    def inference(self, g, batch_size: int):
        """DGL's layer-wise inference: every node's layer output before the next layer."""
        feat = g.ndata["feat"]
        sampler = MultiLayerFullNeighborSampler(1)
        loader = DataLoader(g, torch.arange(g.num_nodes()), sampler, batch_size=batch_size,
                            shuffle=False, drop_last=False, num_workers=0)
        for i in range(len(self.layers)):
            y = None
            for input_nodes, output_nodes, blocks in loader:
                h = self.apply_layer(i, blocks[0], feat[input_nodes])
                if y is None:
                    y = torch.empty(g.num_nodes(), h.shape[1])
                y[output_nodes] = h
            feat = y
        return feat


def load_graph(arrays: dict):
    """The DGL graph (CSC: a node's listed neighbours are its in-edges) with features and
    labels, from gnnsys's arrays; the splits as int64 tensors."""
    load = lambda name: np.load(arrays[name], mmap_mode="r", allow_pickle=False)  # noqa: E731
    indptr = torch.from_numpy(np.asarray(load("indptr"), dtype=np.int64))
    indices = torch.from_numpy(np.asarray(load("indices"), dtype=np.int64))
    g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.int64))))
    g.ndata["feat"] = torch.from_numpy(np.array(load("x"), dtype=np.float32))
    g.ndata["label"] = torch.from_numpy(np.asarray(load("y"), dtype=np.int64))
    split = lambda name: torch.from_numpy(np.asarray(load(name), dtype=np.int64))  # noqa: E731
    return g, split("train_idx"), split("test_idx")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arrays", required=True,
                    help="JSON {name: .npy path} for indptr, indices, x, y, train_idx, test_idx")
    ap.add_argument("--arch", choices=["sage", "gcn", "gat"], default="sage")
    ap.add_argument("--heads", type=int, default=4, help="GAT's attention heads")
    ap.add_argument("--fanouts", type=int, nargs="+", required=True, help="seed outward")
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--dropout", type=float, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--eval-batch-size", type=int, default=4096)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--no-test", action="store_true",
                    help="skip the test pass (its layer-wise inference: minutes on big graphs)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dgl.seed(args.seed)

    start = time.perf_counter()
    g, train_idx, test_idx = load_graph(json.loads(args.arrays))
    load_s = time.perf_counter() - start
    labels = g.ndata["label"]
    model = Model(args.arch, g.ndata["feat"].shape[1], args.hidden, int(labels.max()) + 1,
                  len(args.fanouts), args.dropout, args.heads)
    sampler = NeighborSampler(list(reversed(args.fanouts)), prefetch_node_feats=["feat"],
                              prefetch_labels=["label"])
    loader = DataLoader(g, train_idx, sampler, batch_size=args.batch_size, shuffle=True,
                        drop_last=False, num_workers=0)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    epochs = []
    for epoch in range(args.epochs):
        model.train()
        start, loss_sum, steps = time.perf_counter(), 0.0, 0
        for input_nodes, output_nodes, blocks in loader:
            logits = model(blocks, blocks[0].srcdata["feat"])
            loss = F.cross_entropy(logits, blocks[-1].dstdata["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += float(loss)
            steps += 1
        epochs.append({"epoch_s": time.perf_counter() - start, "steps": steps,
                       "loss": loss_sum / max(steps, 1)})
        print(f"dgl epoch {epoch + 1}: {epochs[-1]['epoch_s']:.1f} s", file=sys.stderr, flush=True)
    start, test_acc = time.perf_counter(), None
    if not args.no_test:
        model.eval()
        pred = model.inference(g, args.eval_batch_size).argmax(1)
        test_acc = float((pred[test_idx] == labels[test_idx]).float().mean())
    print(json.dumps({"epochs": epochs, "test_acc": test_acc,
                      "eval_s": time.perf_counter() - start, "load_s": load_s,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "versions": {"dgl": dgl.__version__, "torch": torch.__version__},
                      "pid": os.getpid()}))


if __name__ == "__main__":
    main()
