"""A link-prediction epoch, gnnsys against DGL 2.1's own link-prediction loop: each side in
a process of its own, alone, on the same training graph, features, settings and the same
positive edges each epoch (gnnsys's `EdgeLoader.epoch_order`, handed to DGL as .npy).

gnnsys: `gnnsys train` of the config (mode link) for --epochs epochs, evaluated once after
the last (not timed). DGL: scripts/peers/dgl_link_epoch.py under --peer-python (the
environment scripts/setup_dgl_baseline.sh makes): NeighborSampler + as_edge_prediction_
sampler with a uniform negative sampler, SAGEConv, the same MLP decoder and loss. Rounds
alternate which side runs first; the first epoch of each run (warm-up) is not counted.
Reports each side's steady epoch seconds (median, range), DGL's over gnnsys's per round,
the mean training loss of each epoch on both sides (the equal-work check) and peak RSS.

    python scripts/bench_link_epoch.py --config configs/link-synthetic-products.yaml \\
        --peer-python .dgl-venv/bin/python --epochs 3 --rounds 3 --threads 2
"""
import harness  # first: gnnsys sets the OpenMP wait default before torch loads OpenMP
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from gnnsys import runlog
from gnnsys.config import load_config
from gnnsys.link.data import LinkData
from gnnsys.link.loader import EdgeLoader

PEER_SCRIPT = Path(__file__).resolve().parent / "peers" / "dgl_link_epoch.py"


def peer_arrays(config, epochs: int, folder: Path) -> dict:
    """{name: .npy path}: the run's training graph, features and each epoch's positives."""
    data = LinkData(config)
    g = data.graph
    loader = EdgeLoader(None, data.train_pairs, g.degree(), config.sampler.batch_size,
                        seed=config.train.seed, prefetch=0,
                        epoch_pairs=config.link.epoch_pairs)
    arrays = {"indptr": g.indptr, "indices": g.indices, "x": g.x,
              **{f"pairs_{e}": data.train_pairs[:, loader.epoch_order(e)]
                 for e in range(epochs)}}
    paths = {}
    for name, array in arrays.items():
        paths[name] = str(folder / f"{name}.npy")
        np.save(paths[name], np.asarray(array), allow_pickle=False)
    return paths


def gnnsys_run(args, run_dir: Path) -> dict:
    proc = harness.start_train(args.config, [
        *args.set, f"train.epochs={args.epochs}", f"train.eval_every={args.epochs}",
        "train.patience=0", f"sampler.threads={args.threads}", "cluster.workers=1",
        "train.progress=false", "run.checkpoint_every=0", f"run.dir={run_dir}"])
    harness.finish(proc)
    epochs = runlog.epochs(run_dir)
    return {"epoch_s": [e["epoch_s"] for e in epochs], "loss": [e["loss"] for e in epochs],
            "peak_rss_mb": runlog.final(run_dir)["peak_rss_mb"]}


def dgl_run(config, args, arrays: dict) -> dict:
    m, s = config.model, config.sampler
    command = [args.peer_python, str(PEER_SCRIPT), "--arrays", json.dumps(arrays),
               "--fanouts", *map(str, s.fanouts), "--hidden", str(m.hidden),
               "--dropout", str(m.dropout), "--batch-size", str(s.batch_size),
               "--lr", str(config.train.lr), "--epochs", str(args.epochs),
               "--seed", str(config.train.seed), "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    if done.returncode:
        raise SystemExit(f"the DGL run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {"epoch_s": [e["epoch_s"] for e in out["epochs"]],
            "loss": [e["loss"] for e in out["epochs"]], "peak_rss_mb": out["peak_rss_mb"],
            "versions": out["versions"]}


def check(config, args) -> None:
    """One line for what the comparison cannot run."""
    if not args.peer_python or not Path(args.peer_python).is_file():
        raise SystemExit("--peer-python must be the python of the DGL environment (bash "
                         "scripts/setup_dgl_baseline.sh .dgl-venv makes .dgl-venv/bin/python)")
    m = config.model
    if (config.mode, m.arch, config.link.decoder, config.link.negatives,
            config.link.node_embedding, m.norm, m.residual) != \
            ("link", "sage", "mlp", "uniform", 0, "none", False):
        raise SystemExit("the DGL loop is SAGE with the mlp decoder and uniform negatives: "
                         "the config must be mode link, model.arch sage (no norm, no "
                         "residual), link.decoder mlp, link.negatives uniform, no "
                         "link.node_embedding")
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2: the first epoch (warm-up) is not counted")


def table(runs: dict) -> str:
    steady = {side: [s for run in rs for s in harness.after_first(run["epoch_s"])]
              for side, rs in runs.items()}
    rows = []
    for side, rs in runs.items():
        loss = [statistics.mean(run["loss"][e] for run in rs) for e in range(len(rs[0]["loss"]))]
        rows.append([side, len(rs), f"{statistics.median(steady[side]):.2f}",
                     f"{min(steady[side]):.2f}-{max(steady[side]):.2f}",
                     " / ".join(f"{v:.4f}" for v in loss),
                     f"{max(run['peak_rss_mb'] for run in rs):.0f}"])
    ratios = [harness.median_after_first(d["epoch_s"]) / harness.median_after_first(g["epoch_s"])
              for g, d in zip(runs["gnnsys"], runs["dgl"])]
    out = harness.markdown(["side", "runs", "steady epoch s (median)", "range",
                            "mean loss per epoch", "peak RSS MB"], rows)
    return out + (f"\nDGL / gnnsys epoch time per round: {', '.join(f'{r:.2f}x' for r in ratios)}"
                  f" (min {min(ratios):.2f}x)")


def main(argv=None) -> dict:
    ap = harness.parser(__doc__, config="configs/link-synthetic-products.yaml", set=True,
                        epochs=3, rounds=3, threads=2, json=True)
    ap.add_argument("--peer-python", help="the DGL environment's python")
    args = ap.parse_args(argv)
    config = load_config(args.config, overrides=args.set)
    check(config, args)
    runs = {"gnnsys": [], "dgl": []}
    with tempfile.TemporaryDirectory(prefix="bench-link-epoch-") as tmp:
        arrays = peer_arrays(config, args.epochs, Path(tmp))
        for r in range(args.rounds):
            for side in (["gnnsys", "dgl"] if r % 2 == 0 else ["dgl", "gnnsys"]):
                run = (gnnsys_run(args, Path(tmp) / f"run-{r}") if side == "gnnsys"
                       else dgl_run(config, args, arrays))
                runs[side].append(run)
                print(f"round {r + 1} {side}: epochs {[round(e, 2) for e in run['epoch_s']]} s,"
                      f" loss {[round(v, 4) for v in run['loss']]}, peak "
                      f"{run['peak_rss_mb']:.0f} MB, load {harness.load_average()}", flush=True)
                harness.write_json(args.json, runs)
    print(table(runs))
    return runs


if __name__ == "__main__":
    main()
