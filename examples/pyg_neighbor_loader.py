"""A PyG GraphSAGE trained with gnnsys's sampler: PyG's NeighborLoader loop, one import
changed, no pyg-lib or torch-sparse needed.

    python examples/pyg_neighbor_loader.py                     # synthetic graph, no download
    python examples/pyg_neighbor_loader.py --dataset cora      # needs the Cora bundle
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE

from gnnsys.datasets import load_dataset
from gnnsys.interop.pyg import to_pyg
from gnnsys.pyg import NeighborLoader      # was: from torch_geometric.loader import ...


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic-tiny")
    parser.add_argument("--nodes", type=int, help="synthetic graphs: number of nodes")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    args = parser.parse_args(argv)
    params = {"num_nodes": args.nodes} if args.nodes else None
    data = to_pyg(load_dataset(args.dataset, params=params))
    torch.manual_seed(0)

    train_loader = NeighborLoader(data, num_neighbors=args.fanouts, shuffle=True,
                                  input_nodes=data.train_mask, batch_size=args.batch_size,
                                  num_workers=2)           # one background sampling thread
    test_loader = NeighborLoader(data, num_neighbors=args.fanouts, batch_size=1024,
                                 input_nodes=data.test_mask)
    model = GraphSAGE(data.num_features, 64, num_layers=len(args.fanouts),
                      out_channels=int(data.y.max()) + 1, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    for epoch in range(args.epochs):
        model.train()
        started, total_loss = time.perf_counter(), 0.0
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index,     # trim_to_layer: skip dead rows
                        num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * batch.batch_size
        print(f"epoch {epoch}: loss {total_loss / int(data.train_mask.sum()):.4f} "
              f"({time.perf_counter() - started:.2f} s)")

    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in test_loader:
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
    print(f"test accuracy {correct / int(data.test_mask.sum()):.4f}")


if __name__ == "__main__":
    main()
