"""Temporal training speed against PyG's TGN example (issue 16), in one run.

    python scripts/bench_temporal_pyg.py --config configs/tgn-wikipedia.yaml --epochs 5 --threads 2

Each side runs in a process of its own, and their epochs alternate, gnnsys then PyG
(A B A B ...): the parent lets one child run an epoch (training, then validation and
test) while the other waits idle, so both see the same machine load and neither side's
thread pools share a process with the other's.
(a) gnnsys: the temporal mode as `gnnsys train` runs it (the one TrainingLoop, one
    process), with the config's settings and sampler.threads = torch threads = --threads;
    as in every run, small batches train on one torch thread (gnnsys/temporal/mode.py)
    and the batch planner's thread has the rest (the header line says which).
(b) PyG's examples/tgn.py model: TGNMemory (IdentityMessage, LastAggregator),
    LastNeighborLoader, a TransformerConv GraphAttentionEmbedding, the example's
    LinkPredictor, Adam at the example's lr, BCE loss; the same chronological split,
    batch size, memory / time / embedding dims and neighbours as the config, and the very
    same negative destinations (gnnsys's random ones, `BatchPlanner.negatives`).
    Both train on one random negative per event: gnnsys's side runs with
    temporal.train_negative_strategy=random whatever the config ships (`--set` overrides).

Both report events/s of the training epoch (median over epochs) and the test AP (the
positive against the first negative of each event, one AP over the phase) at the epoch
with the best validation AP, evaluated as TGN does: validation continues from the
training memory, the test from the validation memory.

Both children get the same OpenMP setting: gnnsys's default OMP_WAIT_POLICY=PASSIVE
(idle threads sleep at once; gnnsys/__init__.py) unless the shell sets it, or
GOMP_SPINCOUNT (idle threads spin that many times, then sleep). A spin speeds both up,
PyG's many small ops more (BENCHMARKS.md); the header line prints the setting.

Without edge features PyG's TGNMemory fails (its message store drops zero-width
messages), so PyG gets one all-zero message column; torch-scatter / pyg-lib are not
needed (PyG's pure-torch scatter fallbacks run).
"""
import harness  # first: gnnsys sets the OpenMP wait default before torch loads OpenMP
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import Linear
from torch_geometric.data import TemporalData
from torch_geometric.nn import TransformerConv
from torch_geometric.nn.models.tgn import (IdentityMessage, LastAggregator,
                                           LastNeighborLoader, TGNMemory)

from gnnsys.config import load_config
from gnnsys.temporal.metrics import link_metrics


# ---------------------------------------------------------------- PyG's example model
class GraphAttentionEmbedding(torch.nn.Module):
    def __init__(self, in_channels, out_channels, msg_dim, time_enc):
        super().__init__()
        self.time_enc = time_enc
        edge_dim = msg_dim + time_enc.out_channels
        self.conv = TransformerConv(in_channels, out_channels // 2, heads=2, dropout=0.1,
                                    edge_dim=edge_dim)

    def forward(self, x, last_update, edge_index, t, msg):
        rel_t = last_update[edge_index[0]] - t
        rel_t_enc = self.time_enc(rel_t.to(x.dtype))
        return self.conv(x, edge_index, torch.cat([rel_t_enc, msg], dim=-1))


class LinkPredictor(torch.nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.lin_src = Linear(in_channels, in_channels)
        self.lin_dst = Linear(in_channels, in_channels)
        self.lin_final = Linear(in_channels, 1)

    def forward(self, z_src, z_dst):
        return self.lin_final((self.lin_src(z_src) + self.lin_dst(z_dst)).relu())


class PygTGN:
    """examples/tgn.py's training and evaluation, over gnnsys's split and negatives."""

    def __init__(self, events, planner, config, lr: float, seed: int):
        tc = config.temporal
        self.events, self.planner = events, planner
        self.batch_size = config.sampler.batch_size
        self.eval_negatives = max(1, tc.eval_negatives)
        msg = torch.zeros(len(events.src), 1)                # see the module docstring
        self.data = TemporalData(src=torch.from_numpy(events.src), dst=torch.from_numpy(events.dst),
                                 t=torch.from_numpy(events.t.astype(np.int64)), msg=msg)
        outer = torch.get_rng_state()         # gnnsys's stream stays as a lone run's
        torch.manual_seed(seed)
        n = events.num_nodes
        self.memory = TGNMemory(n, 1, tc.memory_dim, tc.time_dim,
                                message_module=IdentityMessage(1, tc.memory_dim, tc.time_dim),
                                aggregator_module=LastAggregator())
        self.gnn = GraphAttentionEmbedding(tc.memory_dim, tc.embedding_dim, 1, self.memory.time_enc)
        self.link_pred = LinkPredictor(tc.embedding_dim)
        self.optimizer = torch.optim.Adam(set(self.memory.parameters()) | set(self.gnn.parameters())
                                          | set(self.link_pred.parameters()), lr=lr)
        self.criterion = torch.nn.BCEWithLogitsLoss()
        self.neighbor_loader = LastNeighborLoader(n, size=tc.num_neighbors)
        self.assoc = torch.empty(n, dtype=torch.long)
        self.rng = torch.get_rng_state()          # its own dropout stream, not gnnsys's
        torch.set_rng_state(outer)

    def _batches(self, phase: str, epoch: int, num_negatives: int):
        lo, hi = getattr(self.events, phase)
        for index, a in enumerate(range(lo, hi, self.batch_size)):
            b = min(a + self.batch_size, hi)
            neg, _ = self.planner.negatives(phase, epoch, index, a, b, num_negatives)
            yield self.data[a:b], torch.from_numpy(neg[:, 0])

    def _embed(self, batch, neg_dst):
        n_id = torch.cat([batch.src, batch.dst, neg_dst]).unique()
        n_id, edge_index, e_id = self.neighbor_loader(n_id)
        self.assoc[n_id] = torch.arange(n_id.size(0))
        z, last_update = self.memory(n_id)
        z = self.gnn(z, last_update, edge_index, self.data.t[e_id], self.data.msg[e_id])
        a = self.assoc
        return (self.link_pred(z[a[batch.src]], z[a[batch.dst]]),
                self.link_pred(z[a[batch.src]], z[a[neg_dst]]))

    def train_epoch(self, epoch: int) -> float:
        """One training epoch; returns its wall seconds."""
        self.memory.train(), self.gnn.train(), self.link_pred.train()
        self.memory.reset_state()
        self.neighbor_loader.reset_state()
        start = time.perf_counter()
        for batch, neg_dst in self._batches("train", epoch, 1):
            self.optimizer.zero_grad()
            pos_out, neg_out = self._embed(batch, neg_dst)
            loss = self.criterion(pos_out, torch.ones_like(pos_out))
            loss = loss + self.criterion(neg_out, torch.zeros_like(neg_out))
            self.memory.update_state(batch.src, batch.dst, batch.t, batch.msg)
            self.neighbor_loader.insert(batch.src, batch.dst)
            loss.backward()
            self.optimizer.step()
            self.memory.detach()
        return time.perf_counter() - start

    @torch.no_grad()
    def evaluate(self, phase: str, epoch: int) -> float:
        self.memory.eval(), self.gnn.eval(), self.link_pred.eval()
        pos, neg = [], []
        for batch, neg_dst in self._batches(phase, epoch, self.eval_negatives):
            pos_out, neg_out = self._embed(batch, neg_dst)
            pos.append(pos_out.view(-1))
            neg.append(neg_out.view(-1, 1))
            self.memory.update_state(batch.src, batch.dst, batch.t, batch.msg)
            self.neighbor_loader.insert(batch.src, batch.dst)
        return link_metrics(torch.cat(pos).numpy(), torch.cat(neg).numpy(), phase)[f"{phase}_ap"]

    def epoch(self, epoch: int) -> dict:
        """Train, then validation and test continuing from its memory (TGN's protocol)."""
        outer = torch.get_rng_state()
        torch.set_rng_state(self.rng)
        try:
            seconds = self.train_epoch(epoch)
            val_ap = self.evaluate("val", epoch)
            # gnnsys tests at train.epochs; the same stream here
            test_ap = self.evaluate("test", self.epochs)
        finally:
            self.rng = torch.get_rng_state()
            torch.set_rng_state(outer)
        return {"epoch_s": seconds, "val_ap": val_ap, "test_ap": test_ap}


# ---------------------------------------------------------------- one side per process
SAY = "bench-temporal-pyg: "          # the protocol's lines on a child's stdout


def say(record: dict) -> None:
    print(SAY + json.dumps(record), flush=True)


def wait_for_turn() -> None:
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("bench_temporal_pyg: the parent went away")


def gnnsys_side(loop, args) -> None:
    """The loop's run, each epoch (and the final evaluation) started by the parent."""
    plain_epoch = loop._epoch

    def gated(epoch: int) -> dict:
        wait_for_turn()
        record = plain_epoch(epoch)
        say({"epoch_s": record["epoch_s"], "val_ap": record["val_ap"]})
        if epoch + 1 == args.epochs:
            wait_for_turn()                      # the final evaluation is a turn too
        return record

    loop._epoch = gated
    result = loop.run()
    events = loop.mode.events
    say({"final": {"val_ap": result["val_ap"], "test_ap": result["test_ap"],
                   "train_events": int(events.train[1] - events.train[0]),
                   "torch_threads": loop.training_threads()}})


def pyg_side(loop, args) -> None:
    """PyG's example over the loop's events and negatives (the loop itself never trains)."""
    torch.set_num_threads(args.threads)
    pyg = PygTGN(loop.mode.events, loop.mode.planner, loop.config, args.pyg_lr, args.seed)
    pyg.epochs = args.epochs
    for epoch in range(args.epochs):
        wait_for_turn()
        say(pyg.epoch(epoch))


def start_side(side: str, argv: list) -> subprocess.Popen:
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    return subprocess.Popen([sys.executable, __file__, "--side", side, *argv], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def turn(child: subprocess.Popen) -> dict:
    """Let `child` run its next epoch; its record."""
    child.stdin.write("go\n")
    child.stdin.flush()
    for line in child.stdout:
        if line.startswith(SAY):
            return json.loads(line[len(SAY):])
    raise SystemExit(f"bench_temporal_pyg: the {child.args[3]} side stopped "
                     f"(exit {child.wait()}); its error is above")


def alternate(argv: list, args) -> dict:
    """Both sides as children, epoch by epoch: gnnsys, then PyG."""
    sides = {side: start_side(side, argv) for side in ("gnnsys", "pyg")}
    try:
        gnnsys_s, pyg_records = [], []
        for epoch in range(args.epochs):
            record = turn(sides["gnnsys"])
            gnnsys_s.append(record["epoch_s"])
            pyg_records.append(turn(sides["pyg"]))
            print(f"epoch {epoch + 1}: gnnsys {record['epoch_s']:.2f} s val AP "
                  f"{record['val_ap']:.4f} | PyG {pyg_records[-1]['epoch_s']:.2f} s val AP "
                  f"{pyg_records[-1]['val_ap']:.4f} | load {harness.load_average()}", flush=True)
        final = turn(sides["gnnsys"])["final"]
    finally:
        for child in sides.values():
            child.stdin.close()
            child.wait()
    return {"result": final, "gnnsys_s": gnnsys_s, "pyg": pyg_records,
            "train_events": final["train_events"], "torch_threads": final["torch_threads"]}


def main(argv=None) -> None:
    ap = harness.parser(__doc__, config="configs/tgn-wikipedia.yaml", epochs=5, threads=2,
                        seed=0, set=True)
    ap.add_argument("--pyg-lr", type=float, default=1e-4, help="examples/tgn.py's lr")
    ap.add_argument("--run-dir", default="runs/bench-temporal-pyg")
    ap.add_argument("--side", choices=["gnnsys", "pyg"],
                    help="(internal) run one side, its epochs started over stdin")
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = ap.parse_args(argv)
    if args.side:
        config = load_config(args.config, [
            f"sampler.threads={args.threads}", f"train.epochs={args.epochs}",
            f"train.seed={args.seed}", "cluster.workers=1", "train.progress=false",
            f"run.dir={Path(args.run_dir) / args.side}", "train.device=cpu",
            "temporal.train_negative_strategy=random", *args.set])
        side = gnnsys_side if args.side == "gnnsys" else pyg_side
        harness.on_loop(config, lambda loop: side(loop, args))
        return
    config = load_config(args.config, args.set)
    load_start = harness.load_average()
    run = alternate(argv, args)
    result, train_events = run["result"], run["train_events"]
    best = max(run["pyg"], key=lambda r: r["val_ap"])
    g_rate = train_events / statistics.median(run["gnnsys_s"])
    p_rate = train_events / statistics.median(r["epoch_s"] for r in run["pyg"])
    rows = [("gnnsys temporal TGN", g_rate, result["val_ap"], result["test_ap"]),
            ("PyG examples/tgn.py", p_rate, best["val_ap"], best["test_ap"])]
    print(f"\n{config.dataset.name}, {args.epochs} epochs, batch {config.sampler.batch_size}, "
          f"{args.threads} threads (torch trains on {run['torch_threads']} in gnnsys, "
          f"{args.threads} in PyG), {train_events:,} training events, "
          f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', '(unset)')}, "
          f"GOMP_SPINCOUNT {os.environ.get('GOMP_SPINCOUNT', '(unset)')}; "
          f"load average (1/5/15 min) at start {load_start}, at end {harness.load_average()}\n")
    print(harness.markdown(["method", "train events/s (median)", "best val AP",
                            "test AP at best val"],
                           [[name, f"{rate:,.0f}", f"{val:.4f}", f"{test:.4f}"]
                            for name, rate, val, test in rows], align="lrrr"))
    print(f"\ngnnsys / PyG events/s: {g_rate / p_rate:.2f}x; test AP difference "
          f"{result['test_ap'] - best['test_ap']:+.4f}")


if __name__ == "__main__":
    main()
