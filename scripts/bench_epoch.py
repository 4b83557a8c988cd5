"""Where a minibatch training step's time goes: batch wait, forward and backward per layer,
optimizer, with each layer's FLOPs; gnnsys's step against the one it replaced (issue 34).

The real training loop is built (`harness.on_loop`, as `gnnsys train` builds it) and its
own batches are stepped: zero_grad, backward, Adam. Forward time is measured per
`BlockGNN.layer` call (aggregation, linear maps, activation and dropout), backward per
layer from the moment the gradient reaches a layer's output to the moment it reaches its
input's layer. Steps alternate between the variants (`--variants`), so machine noise hits
all alike; the first `--warmup` steps are not counted. Variants, each change on its own:
  pyg+torch-dropout:  PyG's SAGEConv message passing and torch's dropout (before issue 34);
  pyg+hashed-dropout: the same with gnnsys's hashed dropout (gnnsys/models/dropout.py);
  gnnsys:             hashed dropout and the SAGE mean as one CSR product (as shipped).

    python scripts/bench_epoch.py                                   # synthetic-products
    python scripts/bench_epoch.py --variants gnnsys                 # one side alone
    python scripts/bench_epoch.py --config configs/quickstart.yaml --steps 6
"""
import harness  # first: gnnsys sets the OpenMP wait default before torch loads OpenMP
import time

import numpy as np
import torch
import torch.nn.functional as F

from gnnsys.config import load_config
from gnnsys.models import block_gnn
from gnnsys.models.dropout import dropout as hashed_dropout

def _pyg_sage(conv, x, edge_index, num_dst):
    return conv((x, x[:num_dst]), edge_index)


_torch_dropout = lambda x, p, training: F.dropout(x, p=p, training=training)   # noqa: E731
# name: (dropout, SAGE mean aggregation) patched into gnnsys.models.block_gnn
SHIPPED = (hashed_dropout, block_gnn._sage_mean_csr)
VARIANTS = {"pyg+torch-dropout": (_torch_dropout, _pyg_sage),
            "pyg+hashed-dropout": (hashed_dropout, _pyg_sage),
            "gnnsys": SHIPPED}
DEFAULT_SETS = ["mode=minibatch", "dataset.name=synthetic-products", "model.arch=sage", "model.hidden=256",
                "model.layers=3", "model.dropout=0.5", "sampler.fanouts=[15,10,5]",
                "sampler.batch_size=1024", "train.lr=0.003", "train.progress=false",
                "cluster.workers=1"]


def layer_flops(model, blocks, in_dim: int) -> list:
    """Multiply-adds x 2 of each layer's forward: its linear maps on the targets (SAGE:
    two, neighbour mean and root) and one add per sampled edge and input column."""
    flops, width = [], in_dim
    for conv, block in zip(model.convs, blocks):
        out = next(p for p in conv.parameters() if p.dim() == 2).shape[0]
        maps = 2 if model.arch == "sage" else 1
        flops.append(2 * maps * block.num_dst * width * out + block.edge_index.shape[1] * width)
        width = out
    return flops


def every_batch(mode):
    """The mode's training batches, epoch after epoch (a small graph has few per epoch)."""
    epoch = 0
    while True:
        yield from mode.train_batches(epoch)
        epoch += 1


def profile(loop, steps: int, warmup: int, variants: list) -> dict:
    """{variant: [per-step dict of seconds]} over `steps` counted steps each."""
    model, mode, optimizer = loop.model, loop.mode, loop.optimizer
    forward, grad_seen = [], []
    plain_layer = model.layer

    def timed_layer(i, x, *args, **kwargs):
        start = time.perf_counter()
        out = plain_layer(i, x, *args, **kwargs)
        forward.append(time.perf_counter() - start)
        if out.requires_grad:
            out.register_hook(lambda grad, i=i: grad_seen.append((i, time.perf_counter())))
        return out

    model.layer = timed_layer
    results = {name: [] for name in variants}
    batches = every_batch(mode)
    model.train()
    for step in range(warmup + steps * len(variants)):
        name = variants[step % len(variants)]
        block_gnn.dropout, block_gnn._sage_mean_csr = VARIANTS[name]
        forward.clear()
        grad_seen.clear()
        wait_before = mode.wait_s
        start = time.perf_counter()
        loss, _, _ = next(batches)
        fetched = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        backward_start = time.perf_counter()
        loss.backward()
        backward_end = time.perf_counter()
        optimizer.step()
        end = time.perf_counter()
        if step < warmup:
            continue
        # grad reaches the last layer's output first; layer i's backward runs until the
        # grad reaches layer i - 1's output (layer 0: until backward returns)
        seen = dict(grad_seen)
        marks = [seen.get(i, backward_start) for i in range(len(forward))] + [backward_end]
        backward = [0.0] * len(forward)
        for i in range(len(forward)):
            after = backward_end if i == 0 else seen.get(i - 1, backward_end)
            backward[i] = after - marks[i]
        results[name].append({"wait": mode.wait_s - wait_before, "forward": list(forward),
                              "loss_and_batch": fetched - start - sum(forward)
                              - (mode.wait_s - wait_before),
                              "backward": backward, "optimizer": end - backward_end,
                              "step": end - start})
    block_gnn.dropout, block_gnn._sage_mean_csr = SHIPPED
    model.layer = plain_layer
    return results


def table(results: dict, flops: list) -> str:
    layers = len(flops)
    header = ["variant", "step s (median)", "range", "batch wait",
              *[f"fwd L{i + 1}" for i in range(layers)],
              *[f"bwd L{i + 1}" for i in range(layers)], "optimizer", "speed vs first"]
    medians = {name: float(np.median([s["step"] for s in steps]))
               for name, steps in results.items()}
    rows, first = [], next(iter(results))
    for name, steps in results.items():
        med = lambda key, i=None: float(np.median([s[key] if i is None else s[key][i]
                                                   for s in steps]))
        totals = [s["step"] for s in steps]
        rows.append([name, f"{medians[name]:.3f}", f"{min(totals):.3f}-{max(totals):.3f}",
                     f"{med('wait'):.3f}",
                     *[f"{med('forward', i):.3f}" for i in range(layers)],
                     *[f"{med('backward', i):.3f}" for i in range(layers)],
                     f"{med('optimizer'):.3f}",
                     f"{medians[first] / medians[name]:.2f}x"])
    flop_line = "forward GFLOP per layer: " + ", ".join(f"L{i + 1} {f / 1e9:.2f}"
                                                        for i, f in enumerate(flops))
    return harness.markdown(header, rows, align="l" + "r" * (len(header) - 1)) + "\n" + flop_line


def main(argv=None):
    parser = harness.parser(__doc__, config=True, set=True, threads=2, json=True)
    parser.add_argument("--steps", type=int, default=8, help="counted steps per variant")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    overrides = ([] if args.config else DEFAULT_SETS) + args.set + [
        "train.progress=false", "run.checkpoint_every=0", f"sampler.threads={args.threads}"]
    config = load_config(args.config, overrides)
    torch.set_num_threads(args.threads)

    def work(loop):
        results = profile(loop, args.steps, args.warmup, args.variants)
        batch = next(iter(loop.mode.data.loader.epoch(1)))
        return results, layer_flops(loop.model, batch.blocks, loop.mode.data.in_dim)

    [(results, flops)] = harness.on_loop(config, work)
    text = table(results, flops)
    print(f"{config.dataset.name}, {config.model.arch} {config.model.layers} x "
          f"{config.model.hidden}, fanouts {config.sampler.fanouts}, batch "
          f"{config.sampler.batch_size}, {args.threads} threads, load {harness.load_average()}")
    print(text)
    harness.write_json(args.json, {"results": results, "flops": flops, "table": text})
    return results


if __name__ == "__main__":
    main()
