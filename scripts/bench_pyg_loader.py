"""A PyG GraphSAGE epoch through gnnsys.pyg.NeighborLoader vs gnnsys's own trainer (and
PyG's own loader where pyg-lib or torch-sparse imports): time per epoch, time spent
waiting for batches, test accuracy.

    python scripts/bench_pyg_loader.py                                 # synthetic-products
    python scripts/bench_pyg_loader.py --dataset synthetic-tiny --epochs 2 --fanouts 5 5

All rows train the same model (2-layer GraphSAGE, SAGEConv, hidden --hidden, dropout
0.5, Adam lr 0.003) for --epochs epochs with the same fanouts and batch size; the PyG rows
evaluate with exact layer-wise inference (`BasicGNN.inference` over a [-1] loader), as
gnnsys's trainer does. Times are the median over epochs after the first (numba compile).
"""
import tempfile
import time

import harness  # first: gnnsys sets the OpenMP wait default before torch loads OpenMP
import torch
import torch.nn.functional as F
import torch_geometric.typing
from torch_geometric.nn import GraphSAGE

from gnnsys.config import from_dict
from gnnsys.datasets import load_dataset
from gnnsys.interop.pyg import to_pyg
from gnnsys.pyg import NeighborLoader


def pyg_epochs(loader_cls, data, args) -> dict:
    """Train through `loader_cls` (a NeighborLoader class); per-epoch and wait times."""
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, args.hidden, num_layers=len(args.fanouts),
                      out_channels=int(data.y.max()) + 1, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    loader = loader_cls(data, num_neighbors=args.fanouts, input_nodes=data.train_mask,
                        batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    epoch_s, wait_s = [], []
    for _ in range(args.epochs):
        model.train()
        started, waited = time.perf_counter(), 0.0
        batches = iter(loader)
        while True:
            ready = time.perf_counter()
            batch = next(batches, None)
            waited += time.perf_counter() - ready
            if batch is None:
                break
            optimizer.zero_grad()
            # PyG's hierarchical trimming (trim_to_layer): layer l computes only the nodes
            # later layers need, as gnnsys's blocks do; without it every layer runs on
            # every sampled node
            out = model(batch.x, batch.edge_index,
                        num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
        epoch_s.append(time.perf_counter() - started)
        wait_s.append(waited)
    model.eval()
    with torch.no_grad():
        pred = model.inference(loader_cls(data, num_neighbors=[-1], batch_size=4096))
    test = data.test_mask
    accuracy = float((pred[test].argmax(-1) == data.y[test]).float().mean())
    return {"epoch_s": epoch_s, "batch_wait_s": wait_s, "test_acc": accuracy}


def trainer_epochs(args) -> dict:
    with tempfile.TemporaryDirectory() as run_dir:
        final, epochs = harness.train(from_dict({
            "dataset": {"name": args.dataset, **({"params": {"num_nodes": args.nodes}}
                                                  if args.nodes else {})},
            "model": {"arch": "sage", "hidden": args.hidden, "layers": len(args.fanouts),
                      "dropout": 0.5},
            "sampler": {"fanouts": args.fanouts, "batch_size": args.batch_size},
            "train": {"epochs": args.epochs, "lr": 0.003, "progress": False},
            "run": {"dir": run_dir}}))
    return {"epoch_s": [e["epoch_s"] for e in epochs],
            "batch_wait_s": [e.get("batch_wait_s", float("nan")) for e in epochs],
            "test_acc": final["test_acc"]}


def main(argv=None):
    ap = harness.parser(__doc__, epochs=3, json=True)
    ap.add_argument("--dataset", default="synthetic-products")
    ap.add_argument("--nodes", type=int, help="synthetic graphs: override num_nodes")
    ap.add_argument("--fanouts", type=int, nargs="+", default=[15, 10])
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2,
                    help="num_workers of the loaders (gnnsys: batches prepared ahead / 2)")
    args = ap.parse_args(argv)

    data = to_pyg(load_dataset(args.dataset, params={"num_nodes": args.nodes}
                               if args.nodes else None))
    rows = {"gnnsys.pyg.NeighborLoader + PyG GraphSAGE": pyg_epochs(NeighborLoader, data, args),
            "gnnsys trainer (minibatch mode)": trainer_epochs(args)}
    if torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE:
        from torch_geometric.loader import NeighborLoader as PygLoader
        rows["torch_geometric NeighborLoader"] = pyg_epochs(PygLoader, data, args)
    else:
        rows["torch_geometric NeighborLoader"] = {
            "skipped": "needs pyg-lib or torch-sparse, neither importable here"}

    print(f"\n{args.dataset}: {data.num_nodes} nodes, {data.num_edges} edges, fanouts "
          f"{args.fanouts}, batch {args.batch_size}, {args.epochs} epochs\n")
    print(harness.markdown(
        ["loader", "epoch s (median)", "waiting for batches s", "test acc"],
        [[name, f"skipped: {row['skipped']}", "", ""] if "skipped" in row else
         [name, f"{harness.median_after_first(row['epoch_s']):.3f}",
          f"{harness.median_after_first(row['batch_wait_s']):.3f}", f"{row['test_acc']:.4f}"]
         for name, row in rows.items()]))
    harness.write_json(args.json, {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
