"""`train.precision` bf16 against fp32 (issue 34), in one run: epoch time and test metric.

Each config trains once per precision per round, the precisions alternating (fp32, bf16,
fp32, ...) so both see the same machine load, same seed, one worker in this process;
the table gives the median epoch (the first of each run left out) and the test metric
of every run, and bf16's time over fp32's. Whether bf16 pays depends on the hardware
(gnnsys/precision.py): the header says whether this one multiplies bf16 natively.

    python scripts/bench_precision.py                                # cora, citeseer
    python scripts/bench_precision.py --configs configs/tolokers-sage.yaml --rounds 1
"""
import statistics
import tempfile
from pathlib import Path

import harness
import torch
from gnnsys.config import load_config
from gnnsys.precision import PRECISIONS, native_bf16


def main(argv=None):
    parser = harness.parser(__doc__, configs=["configs/cora-sage.yaml",
                                              "configs/citeseer-sage.yaml"],
                            rounds=2, set=True, json=True)
    args = parser.parse_args(argv)
    runs = {(str(c), p): [] for c in args.configs for p in PRECISIONS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for config_path in args.configs:
                for precision in PRECISIONS:
                    config = load_config(config_path, [
                        *args.set, f"train.precision={precision}", "train.progress=false",
                        "cluster.workers=1", f"run.dir={Path(tmp) / f'{r}-{precision}'}"])
                    final, epochs = harness.train(config)
                    runs[str(config_path), precision].append(
                        {"epoch_s": harness.median_after_first(e["epoch_s"] for e in epochs),
                         "test": final[harness.test_metric(final)]})
    rows = []
    for (config_path, precision), rs in runs.items():
        epoch = statistics.median(r["epoch_s"] for r in rs)
        fp32 = statistics.median(r["epoch_s"] for r in runs[config_path, "fp32"])
        rows.append([Path(config_path).name, precision, f"{epoch:.4f}",
                     " / ".join(f"{r['test']:.4f}" for r in rs), f"{epoch / fp32:.2f}x"])
    print(f"native bf16 on this CPU: {native_bf16(torch.device('cpu'))}; "
          f"{args.rounds} round(s); load {harness.load_average()}")
    print(harness.markdown(["config", "precision", "epoch s (median)", "test per run",
                            "time vs fp32"], rows, align="llrlr"))
    harness.write_json(args.json, {f"{c}|{p}": rs for (c, p), rs in runs.items()})
    return runs


if __name__ == "__main__":
    main()
