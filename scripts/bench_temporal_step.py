"""Per-batch time of temporal (TGN) training, two ways of running it in one run (issue 16).

    python scripts/bench_temporal_step.py --config configs/tgn-wikipedia.yaml --batches 20 --rounds 12
    python scripts/bench_temporal_step.py --compare threads --threads 2 --set sampler.batch_size=700

--compare attention (default, TGN only): TGN's attention as `slot_attention`'s fused kernel pair (what
CPUs run) against tensor operations (what GPUs run, the baseline), each on the torch threads
gnnsys trains with. --compare threads: torch's intra-op pool at 1 thread against --threads
threads (the baseline), the choice behind TemporalMode's training_torch_threads (any
temporal model.arch).

Builds the training loop as `gnnsys train` runs it (one process, --threads threads), then
trains short blocks of --batches steps, alternating the two, A B B A A B ..., through one
epoch's batches (a new epoch starts when one ends), so both see the same machine load and
the same stretch of the event stream (later batches have more neighbours, hence the short
blocks and the alternating order). Prints ms per batch split into the model's forward, the
backward, the rest of the step (fetch, batch transfer, loss, optimizer, write-back), and
the median over rounds.
"""
import harness  # first: gnnsys sets the OpenMP wait default before torch loads OpenMP
import statistics
import time

from gnnsys.config import load_config
from gnnsys.distributed.launcher import intra_op_threads
from gnnsys.temporal import models
from gnnsys.temporal.batch import uses_neighbors
from gnnsys.training import TrainingLoop


def compared_paths(compare: str, loop: TrainingLoop, threads: int) -> dict:
    """name -> (attention's device rule, torch threads) of the two paths; the second is the
    baseline."""
    own = models.fused_kernel_on                            # the model's own choice
    trains_on = loop.training_threads()                     # as the loop trains
    if compare == "attention":
        return {"fused kernel": (own, trains_on),
                "tensor ops (baseline)": (lambda device: False, trains_on)}
    return {"1 torch thread": (own, 1), f"{threads} torch threads (baseline)": (own, threads)}


class StepTimer:
    """Training steps of one epoch after another, timing the model's forward (wrapped),
    the backward and the whole step."""

    def __init__(self, loop: TrainingLoop):
        self.loop, self.mode = loop, loop.mode
        self.epoch, self.batches = 0, iter(())
        self.forward_s = 0.0
        forward = self.mode.model.forward_roots

        def timed_forward(*args, **kwargs):
            start = time.perf_counter()
            out = forward(*args, **kwargs)
            self.forward_s += time.perf_counter() - start
            return out
        self.mode.model.forward_roots = timed_forward

    def _next(self):
        try:
            return next(self.batches)
        except StopIteration:
            self.batches = iter(self.mode.train_batches(self.epoch))
            self.epoch += 1
            return next(self.batches)

    def block(self, steps: int, torch_threads: int) -> dict:
        optimizer = self.loop.optimizer
        self.forward_s = backward_s = 0.0
        start = time.perf_counter()
        with intra_op_threads(torch_threads):
            for _ in range(steps):
                loss, _, _ = self._next()
                optimizer.zero_grad(set_to_none=False)
                t = time.perf_counter()
                loss.backward()
                backward_s += time.perf_counter() - t
                self.loop.grad_sync.finish()
                optimizer.step()
        total = time.perf_counter() - start
        ms = 1e3 / steps
        return {"total": total * ms, "forward": self.forward_s * ms, "backward": backward_s * ms,
                "rest": (total - self.forward_s - backward_s) * ms}


def measure(loop: TrainingLoop, args) -> dict:
    """Warm each path up, then --rounds blocks of --batches steps per path, alternating."""
    timer = StepTimer(loop)
    paths = compared_paths(args.compare, loop, args.threads)
    results = {name: [] for name in paths}
    for name, (decide, torch_threads) in paths.items():
        models.fused_kernel_on = decide
        timer.block(args.warmup, torch_threads)
    for round_ in range(args.rounds):
        order = list(paths.items())
        for name, (decide, torch_threads) in (order if round_ % 2 == 0 else order[::-1]):
            models.fused_kernel_on = decide
            results[name].append(timer.block(args.batches, torch_threads))
            print(f"round {round_ + 1} {name}: {results[name][-1]['total']:.2f} ms/batch",
                  flush=True)
    return results


def main(argv=None) -> None:
    ap = harness.parser(__doc__, config="configs/tgn-wikipedia.yaml", threads=1, set=True)
    ap.add_argument("--batches", type=int, default=20, help="training steps per block")
    ap.add_argument("--rounds", type=int, default=12, help="blocks per path")
    ap.add_argument("--warmup", type=int, default=15, help="steps per path before timing")
    ap.add_argument("--compare", choices=("attention", "threads"), default="attention")
    args = ap.parse_args(argv)
    config = load_config(args.config, [
        f"sampler.threads={args.threads}", "cluster.workers=1", "train.progress=false",
        "run.dir=runs/bench-temporal-step", "train.device=cpu", *args.set])
    if config.mode != "temporal":
        raise SystemExit(f"{args.config}: needs mode temporal")
    if args.compare == "attention" and not uses_neighbors(config.model.arch):
        raise SystemExit(f"{args.config}: --compare attention needs model.arch tgn (the "
                         "attention over sampled neighbours is what it compares)")
    load_start = harness.load_average()
    results = harness.on_loop(config, lambda loop: measure(loop, args))[0]
    print(f"\n{config.dataset.name}, {config.model.arch}, batch {config.sampler.batch_size}, "
          f"{args.threads} threads, compile {config.train.compile}, {args.rounds} rounds of "
          f"{args.batches} steps per path; load average (1/5/15 min) at start {load_start}, "
          f"at end {harness.load_average()}\n")
    rows, medians = [], {}
    for name, blocks in results.items():
        med = {k: statistics.median(r[k] for r in blocks) for k in blocks[0]}
        medians[name] = med["total"]
        rows.append([name, f"{med['total']:.2f}", f"{med['forward']:.2f}",
                     f"{med['backward']:.2f}", f"{med['rest']:.2f}",
                     " / ".join(f"{r['total']:.2f}" for r in blocks)])
    print(harness.markdown([args.compare, "ms / batch (median)", "forward", "backward",
                            "rest of the step", "rounds"], rows, align="lrrrrl"))
    (first, faster), (_, baseline) = medians.items()
    print(f"\n{first} against the baseline: {baseline / faster:.2f}x faster per batch")


if __name__ == "__main__":
    main()
