"""Where a minibatch training step's time goes: batch wait, forward and backward per layer,
optimizer, with each layer's FLOPs; gnnsys's step against the one it replaced (issue 34).

The real training loop is built (`harness.on_loop`, as `gnnsys train` builds it) and its
own batches are stepped: zero_grad, backward, Adam. Forward time is measured per
`BlockGNN.layer` call (aggregation, linear maps, activation and dropout), backward per
layer from the moment the gradient reaches a layer's output to the moment it reaches its
input's layer. Steps alternate between the variants (`--variants`), so machine noise hits
all alike; the first `--warmup` steps are not counted. Variants, each change on its own:
  pyg+torch-dropout:  PyG's SAGEConv message passing, torch's ReLU and dropout (before
                      issue 34);
  pyg+hashed-dropout: the same with gnnsys's hashed dropout (gnnsys/models/dropout.py);
  csr+hashed-dropout: and the SAGE mean as one CSR product;
  fused-relu-dropout: and ReLU and dropout in one pass;
  gnnsys:             and the first layer's mean averaged by the sampler (as shipped).
Variants before the last take their batches from a second sampler that gathers every
first-layer source row, as the one before issue 34 did.

With `--peer dgl` it times whole epochs instead: `gnnsys train` and DGL 2.1's own loop
(scripts/peers/dgl_epoch.py, run by the DGL environment's python that
scripts/setup_dgl_baseline.sh makes) on the very same graph arrays and settings, each run
a process of its own, the two sides alternating run by run (`--rounds`), with both sides'
test accuracy after the same epochs and their peak memory.

    python scripts/bench_epoch.py                                   # synthetic-products
    python scripts/bench_epoch.py --variants gnnsys                 # one side alone
    python scripts/bench_epoch.py --config configs/quickstart.yaml --steps 6
    python scripts/bench_epoch.py --peer dgl --peer-python .dgl-venv/bin/python \
        --set dataset.params.train_fraction=0.01                    # 24 steps an epoch
"""
import harness  # first: gnnsys sets the OpenMP wait default before torch loads OpenMP
import copy
import json
import math
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gnnsys import runlog
from gnnsys.config import load_config
from gnnsys.datasets.for_run import load_run_graph
from gnnsys.models import base, sage
from gnnsys.models.dropout import dropout as hashed_dropout
from samplers import FusedSampler

def _pyg_sage(conv, x, edge_index, num_dst):
    return conv((x, x[:num_dst]), edge_index)


def _torch_relu_dropout(x, p, training):
    return F.dropout(F.relu(x), p=p, training=training)


def _two_pass_relu_dropout(x, p, training):
    return hashed_dropout(F.relu(x), p, training)


# name: what it patches into the module that calls it (OWNERS), each change on its own
# ("gather": the sampler gathers the first layer's source rows instead of averaging them)
OWNERS = {"relu_dropout": base, "_sage_mean_csr": sage}
SHIPPED = {name: getattr(module, name) for name, module in OWNERS.items()}
VARIANTS = {
    "pyg+torch-dropout": {"relu_dropout": _torch_relu_dropout, "_sage_mean_csr": _pyg_sage,
                          "gather": True},
    "pyg+hashed-dropout": {"relu_dropout": _two_pass_relu_dropout, "_sage_mean_csr": _pyg_sage,
                           "gather": True},
    "csr+hashed-dropout": {"relu_dropout": _two_pass_relu_dropout, "gather": True},
    "fused-relu-dropout": {"gather": True},
    "gnnsys": {},
}
CONFIG = "configs/products-sage.yaml"          # issue 34's setting
PEER_SCRIPT = Path(__file__).resolve().parent / "peers" / "dgl_epoch.py"  # DGL's venv runs it
PEER_ARRAYS = ("indptr", "indices", "x", "y", "train_idx", "test_idx")


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


def every_batch(mode, loader=None):
    """The mode's training batches (of `loader`: another sampler's), epoch after epoch (a
    small graph has few per epoch)."""
    epoch = 0
    while True:
        yield from mode.train_batches(epoch, loader)
        epoch += 1


def variant_loader(mode, gather: bool):
    """The mode's loader with a sampler of its own (a sampler's work arrays and buffers
    serve one stream of batches, and each variant's stream prefetches in its own thread);
    `gather`: one that gathers every first-layer source row instead of aggregating them (as
    before issue 34)."""
    loader = copy.copy(mode.data.loader)
    s = loader.sampler
    if not isinstance(s, FusedSampler):
        raise SystemExit(f"bench_epoch profiles the CPU sampler, not {type(s).__name__}; "
                         "use --set sampler.device=cpu")
    loader.sampler = FusedSampler(s.indptr, s.indices, s.fanouts, features=s.features,
                                  row_of=s.row_of, num_threads=s.num_threads,
                                  num_buffers=s.num_buffers, overlap_gather=s.overlap_gather,
                                  aggregate=None if gather else s.aggregate)
    return loader


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
    batches = {name: every_batch(mode, variant_loader(mode, VARIANTS[name].get("gather", False)))
               for name in variants}
    model.train()
    for step in range(warmup + steps * len(variants)):
        name = variants[step % len(variants)]
        for attr, value in {**SHIPPED, **VARIANTS[name]}.items():
            if attr != "gather":
                setattr(OWNERS[attr], attr, value)
        forward.clear()
        grad_seen.clear()
        wait_before = mode.wait_s
        start = time.perf_counter()
        loss, _, _ = next(batches[name])
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
    for stream in batches.values():     # stops each stream's prefetching thread
        stream.close()
    for attr, value in SHIPPED.items():
        setattr(OWNERS[attr], attr, value)
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


# ----------------------------------------------------------------------------- whole epochs
def peer_arrays(config, folder: Path) -> dict:
    """{name: .npy path} of the arrays the run trains on, for a peer process: the cached
    graph's own files where they are memory-mapped as they are, else written to `folder`."""
    graph = load_run_graph(config)
    paths = {}
    for name in PEER_ARRAYS:
        array = getattr(graph, name)
        paths[name] = _whole_npy_file(array)
        if paths[name] is None:
            paths[name] = str(folder / f"{name}.npy")
            np.save(paths[name], np.asarray(array), allow_pickle=False)
    return paths


def _whole_npy_file(array) -> str | None:
    """The .npy file `array` is the whole memory map of (None: it is not one)."""
    name = getattr(array, "filename", None) if isinstance(array, np.memmap) else None
    if not name or not str(name).endswith(".npy"):
        return None
    whole = np.load(name, mmap_mode="r", allow_pickle=False)
    same = (whole.shape, whole.dtype, whole.offset) == (array.shape, array.dtype, array.offset)
    return str(name) if same else None


def gnnsys_run(config_path, args, run_dir: Path) -> dict:
    """`gnnsys train` for --epochs epochs in a process of its own (validation and test once,
    after the last): its epoch seconds, test accuracy and peak memory."""
    proc = harness.start_train(config_path, [     # the script's settings win over --set's
        *args.set, f"train.epochs={args.epochs}", f"train.eval_every={args.epochs}",
        "train.patience=0", f"sampler.threads={args.threads}", "cluster.workers=1",
        "train.progress=false", "run.checkpoint_every=0", f"run.dir={run_dir}"])
    harness.finish(proc)
    final = runlog.final(run_dir)
    return {"epoch_s": [e["epoch_s"] for e in runlog.epochs(run_dir)],
            "test_acc": final["test_acc"], "peak_rss_mb": final["peak_rss_mb"]}


def dgl_run(config, args, arrays: dict, test: bool) -> dict:
    """DGL's loop (scripts/peers/dgl_epoch.py) under --peer-python on the same arrays and settings;
    `test`: with its test pass (DGL's layer-wise inference: ~10 min on synthetic-products)."""
    command = [args.peer_python, str(PEER_SCRIPT), "--arrays", json.dumps(arrays),
               "--arch", config.model.arch, "--heads", str(config.model.heads),
               "--fanouts", *map(str, config.sampler.fanouts), "--hidden", str(config.model.hidden),
               "--dropout", str(config.model.dropout), "--batch-size", str(config.sampler.batch_size),
               "--eval-batch-size", str(config.sampler.eval_batch_size), "--lr", str(config.train.lr),
               "--weight-decay", str(config.train.weight_decay), "--epochs", str(args.epochs),
               "--seed", str(config.train.seed), "--threads", str(args.threads),
               *([] if test else ["--no-test"])]
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    if done.returncode:
        raise SystemExit(f"the DGL run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {"epoch_s": [e["epoch_s"] for e in out["epochs"]], "test_acc": out["test_acc"],
            "peak_rss_mb": out["peak_rss_mb"], "versions": out["versions"]}


def check_peer(config, args) -> None:
    """One line for what the DGL side cannot run: its python, or a model it has no loop for."""
    if not args.peer_python or not Path(args.peer_python).is_file():
        raise SystemExit("--peer dgl needs --peer-python: the python of the DGL environment "
                         "(bash scripts/setup_dgl_baseline.sh .dgl-venv makes .dgl-venv/bin/python)")
    if config.mode != "minibatch" or config.model.norm != "none" or config.model.residual:
        raise SystemExit("--peer dgl runs DGL's minibatch example loop: it needs mode "
                         "minibatch, no model.norm and no model.residual")
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2: the first epoch (warm-up) is not counted")


def whole_epochs(config_path, config, args) -> dict:
    """{side: [run, ...]}: `--rounds` rounds of one gnnsys run and one DGL run, the order
    alternating round by round; DGL tests its model in the first `--peer-test-rounds`
    rounds only (its inference is slow; gnnsys's final evaluation is part of every run)."""
    check_peer(config, args)
    runs = {"gnnsys": [], "dgl": []}
    with tempfile.TemporaryDirectory(prefix="bench-epoch-") as tmp:
        arrays = peer_arrays(config, Path(tmp))
        for r in range(args.rounds):
            for side in (["gnnsys", "dgl"] if r % 2 == 0 else ["dgl", "gnnsys"]):
                run = (gnnsys_run(config_path, args, Path(tmp) / f"run-{r}") if side == "gnnsys"
                       else dgl_run(config, args, arrays, test=r < args.peer_test_rounds))
                runs[side].append(run)
                print(f"round {r + 1} {side}: epochs {[round(e, 2) for e in run['epoch_s']]} s, "
                      f"test acc {_acc(run)}, load {harness.load_average()}", flush=True)
    return runs


def epochs_table(runs: dict, steps: int) -> str:
    """Steady epochs (each run's after its first) per side, and DGL's over gnnsys's per round."""
    steady = {side: [s for run in rs for s in harness.after_first(run["epoch_s"])]
              for side, rs in runs.items()}
    ratios = [steady_median(d["epoch_s"]) / steady_median(g["epoch_s"])
              for g, d in zip(runs["gnnsys"], runs["dgl"])]
    rows = []
    for side, rs in runs.items():
        epoch = float(np.median(steady[side]))
        rows.append([side, len(rs), f"{epoch:.2f}", f"{min(steady[side]):.2f}-{max(steady[side]):.2f}",
                     f"{epoch / steps:.3f}",
                     " / ".join(_acc(run) for run in rs),
                     f"{max(run['peak_rss_mb'] for run in rs):,.0f}"])
    header = ["side", "runs", "steady epoch s (median)", "range", "per step s", "test acc",
              "peak RSS MB"]
    return (harness.markdown(header, rows, align="lrrrrlr") + "\n" +
            "DGL epoch / gnnsys epoch, per round (medians of its steady epochs): "
            + ", ".join(f"{r:.2f}x" for r in ratios))


def _acc(run: dict) -> str:
    return "-" if run["test_acc"] is None else f"{run['test_acc']:.4f}"


def steady_median(epoch_s: list) -> float:
    return float(np.median(harness.after_first(epoch_s)))


def main(argv=None):
    parser = harness.parser(__doc__, config=CONFIG, set=True, threads=2, json=True, epochs=3,
                            rounds=2)
    parser.add_argument("--steps", type=int, default=8, help="counted steps per variant")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--peer", choices=["dgl"],
                        help="time whole epochs against this peer's loop instead (--epochs, --rounds)")
    parser.add_argument("--peer-python", help="the peer environment's python")
    parser.add_argument("--peer-test-rounds", type=int, default=1,
                        help="rounds whose peer run also tests its model (DGL's layer-wise "
                             "inference: ~10 min on synthetic-products)")
    args = parser.parse_args(argv)
    overrides = args.set + ["train.progress=false", "run.checkpoint_every=0",
                            f"sampler.threads={args.threads}", "cluster.workers=1"]
    config = load_config(args.config, overrides)
    if args.peer:
        runs = whole_epochs(args.config, config, args)
        steps = math.ceil(len(load_run_graph(config).train_idx) / config.sampler.batch_size)
        text = epochs_table(runs, steps)
        print(f"{config.dataset.name}, {config.model.arch} {config.model.layers} x "
              f"{config.model.hidden}, fanouts {config.sampler.fanouts}, batch "
              f"{config.sampler.batch_size}, {steps} steps an epoch, {args.epochs} epochs a run, "
              f"{args.threads} threads; DGL {runs['dgl'][0]['versions']}")
        print(text)
        harness.write_json(args.json, {"runs": runs, "table": text})
        return runs
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
