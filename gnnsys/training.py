"""The one training loop: every mode (minibatch, temporal, full-graph), 1 or K workers.

`fit(config)` prepares the mode's shared inputs in the driver, starts the workers
(`gnnsys.distributed.launch`: in-process for one, Ray actors for more) and returns rank
0's final metrics. On each worker `TrainingLoop` owns everything that is not the mode's
own business, so a change to how training runs is made here once:

    seeding (and the replicas starting from rank 0's weights), the run directory, resume
    (rank 0 reads the checkpoint and broadcasts it; no shared storage needed), the
    optimizer, backward + one gradient all-reduce + step, progress bars, `cluster.fail_at`,
    per-epoch traffic from the Communicator (one set of keys in every mode), evaluation
    every `train.eval_every` epochs, best-validation model selection, atomic checkpoints
    and the final metrics of the best-validation epoch.

A mode is a `gnnsys.mode.Mode` subclass named in `gnnsys.mode.MODES`, constructed on
every worker as `cls(ctx, config, *cls.prepare(config, graph))`; that class states the
contract (build_model, train_batches, epoch_stats, predict, score, ...).
"""
from __future__ import annotations

import copy
import hashlib
import math
import os
import sys
import threading
import time

import numpy as np
import torch

from . import allocator, precision
from .config import resumable
from .datasets.registry import dataset_files
from .distributed import launch
from .distributed.launcher import intra_op_threads
from .distributed.ranks import gather_outputs, split_process_counters, this_process
from .errors import ConfigError, DatasetMismatch
from .mode import REDUCTIONS, mode_class
from .optimizers import build_optimizer
from .report import chart_stems
from .runlog import (EPOCHS_FROM, RunDir, announce_kernel_compiles, kernel_compiles, progress,
                     summary_writer)

FAIL_EXIT_CODE = 17
_SEEDING = threading.Lock()
# How the loop's own per-rank epoch values combine (a mode declares its own: Mode.reductions)
LOOP_REDUCTIONS = {"epoch_s": "max", "loss_sum": "sum", "examples": "sum", "grad_sync_s": "max",
                   "cpu_cores": "sum", "peak_rss_mb": "sum", "comm_bytes_sent": "sum",
                   "comm_bytes_recv": "sum", "comm_wait_s": "max", "fetch_wait_s": "max"}


def fit(config, graph=None) -> dict:
    """Train as `config` says; `graph` (optional) bypasses the dataset registry."""
    allocator.choice()                  # a bad GNNSYS_MALLOC fails here, not in each worker
    if config.train.compile:
        check_compiler()                # here too, not in each worker's first step
    if config.run.tensorboard:
        summary_writer()                # a missing tensorboard package fails here, not on rank 0
    prepared = mode_class(config.mode).prepare(config, graph)
    d = config.dataset
    files = dataset_files(d.name, d.root, d.path) if graph is None else ""
    return launch(run_worker, config, files, *prepared)[0]


def split_record(per_rank: list[dict]) -> dict:
    """Each split's size and the sha256 of its sorted int64 ids (first 16 hex digits): two
    runs trained and scored on the same items exactly when the digests agree."""
    record = {}
    for name in sorted({name for ids in per_rank for name in ids}):
        ids = np.sort(np.concatenate([np.asarray(r[name], dtype=np.int64)
                                      for r in per_rank if name in r]))
        record[name] = {"count": int(ids.size),
                        "sha256": hashlib.sha256(ids.tobytes()).hexdigest()[:16]}
    return record


def compile_parts(model: torch.nn.Module) -> None:
    """`train.compile`: torch.compile each direct submodule in place (parameters and
    state_dict keys unchanged), with dynamic shapes since batch sizes vary. Parts, not
    the model: a mode may drive its model through methods other than forward (temporal
    mode's forward_roots), which whole-model compilation would not see. Fuses the chains
    of small elementwise ops that dominate TGN's step on CPU; the first epoch pays the
    compilation (tens of seconds on a small CPU)."""
    for part in model.children():
        part.compile(dynamic=True)


def check_compiler() -> None:
    """`train.compile` needs the C++ compiler inductor builds its CPU kernels with; without
    one the first step would fail deep inside torch. Raises ConfigError naming the fix."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:                   # torch moved it: leave the check to torch
        return
    try:
        get_cpp_compiler()
    except Exception as error:
        raise ConfigError(f"train.compile: true needs a C++ compiler for torch.compile and "
                          f"none was found ({type(error).__name__}); install g++ (e.g. "
                          "apt install g++) or set train.compile: false") from None


def run_worker(ctx, config, dataset_files: str, *prepared) -> dict:
    """One worker's whole run (the function `launch` runs on every rank);
    `dataset_files`: what the dataset's files hold (a resume checks they still do)."""
    return TrainingLoop(ctx, config, prepared, dataset_files).run()


class TrainingLoop:
    def __init__(self, ctx, config, prepared=(), dataset_files: str = ""):
        self.ctx, self.config, self.dataset_files = ctx, config, dataset_files
        self.malloc = allocator.keep_freed_memory()   # before the run's first large allocations
        if ctx.is_main:                # a line, not a bar: said with train.progress off too
            announce_kernel_compiles()
        self.comm = ctx.comm
        self.run_dir = RunDir(config.run.dir, writer=ctx.is_main)
        self.run_dir.lock(wait_s=0 if ctx.attempt == 0 else 60)   # a killed rank 0 lets go
        try:
            self._setup(prepared)
            if ctx.attempt == 0:       # after set-up: a refused run leaves the last one be
                self.run_dir.start(config.run.resume, also=[f"{c}.png" for c in chart_stems()])
        except BaseException:
            self.run_dir.unlock()
            raise

    def _setup(self, prepared) -> None:
        ctx, config = self.ctx, self.config
        self.mode = mode_class(config.mode)(ctx, config, *prepared)
        with _SEEDING:       # ranks may be threads of one process, and seeding is global
            torch.manual_seed(config.train.seed)
            np.random.seed(config.train.seed)
            self.model = self.mode.build_model()
        if ctx.world_size > 1:     # replicas start from rank 0's weights, as DDP does
            self.model.load_state_dict(self.comm.broadcast_object(self.model.state_dict()))
        if config.train.compile:
            compile_parts(self.model)
            if ctx.is_main and config.train.progress:
                print("train.compile: the first epoch compiles the model (~20-40 s on 2 "
                      "cores; cached on disk for later runs)", flush=True)
        if (config.train.precision == "bf16" and ctx.is_main
                and not precision.native_bf16(ctx.device)):
            print(f"train.precision: bf16 on {ctx.device.type}, which has no bf16 "
                  "arithmetic in hardware: torch emulates it, usually slower than fp32 "
                  "(see gnnsys/precision.py)", file=sys.stderr, flush=True)
        self.optimizer = build_optimizer(self.model.parameters(), config.train)
        # Buckets of gradients go out while backward still runs, unless the mode's
        # backward runs collectives of its own (full-graph's halo exchange).
        self.grad_sync = self.comm.gradient_sync(
            self.model.parameters(), self.mode.grad_op,
            overlap=not self.mode.collectives_in_backward)
        self.show = ctx.is_main                             # the epoch lines: rank 0's
        self.bars = config.train.progress and ctx.is_main   # (drawn on a terminal only)
        self.key = f"val_{self.mode.metric}"
        # the last epoch done and the selected one, counted from 0 here (and in checkpoints);
        # what is logged or printed counts from 1 (runlog.EPOCHS_FROM)
        self.epoch, self.best_val, self.best_epoch, self.best = -1, float("-inf"), -1, None
        self.best_eval: dict = {}                 # the selected epoch's evaluation
        self.last_eval: dict = {}                 # the latest epoch's evaluation
        self.history: list[dict] = []             # loss and time of the epochs run here

    # ------------------------------------------------------------------ the run
    def run(self) -> dict:
        try:
            self._resume()
            self.run_dir.save_config(self.config)
            setup = self.comm.all_gather_object(self.mode.describe())
            if self.epoch < 0:
                pool = torch.get_num_threads()
                self.run_dir.log("start", {"mode": self.config.mode, "epochs_from": EPOCHS_FROM,
                                  "workers": self.ctx.world_size, "malloc": self.malloc,
                                  "torch_threads": {"train": self.training_threads(),
                                                    "eval": pool},
                                  "split": split_record(self.comm.all_gather_object(
                                      self.mode.split_ids())),
                                  "setup": setup})
            # a resumed run that had stopped early tests its selected model, trains no more
            first = self.config.train.epochs if self._stopped_early() else self.epoch + 1
            for epoch in range(first, self.config.train.epochs):
                self._epoch(epoch)
                if self._out_of_patience(epoch):
                    break
            return self._final()
        finally:
            self.close()

    def close(self) -> None:
        """Release the gradient hooks and the run directory (again: a no-op)."""
        self.grad_sync.close()
        self.run_dir.close()

    def _epoch(self, epoch: int) -> dict:
        config = self.config
        record = self.train_epoch(epoch)
        if (epoch + 1) % config.train.eval_every == 0 or epoch + 1 == config.train.epochs:
            eval_start = time.perf_counter()
            self.last_eval = self.evaluate(self.mode.eval_splits)
            record.update(self.last_eval)
            record["eval_s"] = time.perf_counter() - eval_start      # not part of epoch_s
            if record[self.key] > self.best_val or self.best is None:
                self.best_val, self.best_epoch = record[self.key], epoch
                self.best = self._snapshot()
                self.best_eval = {k: v for k, v in record.items() if k.startswith("val_")}
        self.history.append({"loss": record["loss"], "epoch_s": record["epoch_s"]})
        self.run_dir.log("epoch", record)
        if self.show:
            self._print(record)
            if len(self.history) == 1:        # the first epoch this process ran
                self._print_projection(record, epochs_left=config.train.epochs - epoch - 1)
        self.epoch = epoch
        if self._checkpoint_due(epoch):
            self._checkpoint()
        self.comm.barrier()                       # nobody races ahead of the checkpoint
        return record

    def _checkpoint_due(self, epoch: int) -> bool:
        """Whether `_epoch` checkpoints after this epoch (run.checkpoint_every, and the last)."""
        every = self.config.run.checkpoint_every
        return bool(every) and ((epoch + 1) % every == 0 or epoch + 1 == self.config.train.epochs)

    def _patience_spent(self, epoch: int) -> bool:
        """Whether train.patience epochs have passed since the best validation metric."""
        patience = self.config.train.patience      # the same on every rank
        return bool(patience) and epoch - self.best_epoch >= patience

    def _stopped_early(self) -> bool:
        """Whether the epochs done so far (a resumed run's) had already run out of patience."""
        return self.epoch >= 0 and self._patience_spent(self.epoch)

    def _out_of_patience(self, epoch: int) -> bool:
        """Early stopping after `_patience_spent`. Rank 0 decides for all, so every rank
        leaves the loop after the same epoch."""
        patience = self.config.train.patience
        if not patience or epoch + 1 == self.config.train.epochs:
            return False
        if not self.comm.broadcast_object(self._patience_spent(epoch)):
            return False
        self.run_dir.log("event", {"event": "early_stop", "epoch": epoch + 1,
                                   "best_epoch": self.best_epoch + 1, "patience": patience})
        if self.config.run.checkpoint_every and not self._checkpoint_due(epoch):
            self._checkpoint()                    # a resumed run starts where this one stopped
        return True

    def training_threads(self) -> int:
        """The torch threads the training steps run on: the mode's `training_torch_threads`
        (a mode of small ops may ask for fewer than the process has), else the pool as it is."""
        return self.mode.training_torch_threads or torch.get_num_threads()

    def train_epoch(self, epoch: int) -> dict:
        """One pass of training steps; returns the epoch's record (loss, time, traffic)."""
        self.model.train()
        self._compiles_before_epoch = kernel_compiles()
        self._reset_traffic()          # what came before (evaluation, checkpoint barriers)
        start, cpu_start = time.perf_counter(), time.process_time()
        loss_sum, examples, sync_s = 0.0, 0, 0.0
        bar = progress(total=self.mode.batches_per_epoch, unit="batch",
                       enabled=self.bars and self.mode.batches_per_epoch > 1,
                       desc=f"epoch {epoch + 1}/{self.config.train.epochs}")
        steps = precision.forward_in(self.config.train.precision, self.ctx.device,
                                     self.mode.train_batches(epoch))
        with intra_op_threads(self.training_threads()):
            for i, (loss, count, normaliser) in enumerate(steps):
                if i == self.mode.batches_per_epoch // 2 and self._fail_here(epoch):
                    print(f"cluster.fail_at: worker {self.ctx.rank} exits in epoch "
                          f"{epoch + 1} (a fault test)", file=sys.stderr, flush=True)
                    os._exit(FAIL_EXIT_CODE)          # simulate a crashed worker process
                # zeroed, not None: a parameter a step leaves unused keeps its momentum update
                # in one process and in K (the all-reduce needs every gradient)
                self.optimizer.zero_grad(set_to_none=False)
                loss.backward()
                t_sync = time.perf_counter()
                self.grad_sync.finish()               # what backward has not overlapped
                sync_s += time.perf_counter() - t_sync
                self.optimizer.step()
                value = loss.item()
                loss_sum += value * normaliser
                examples += count
                bar.update()
                bar.set_postfix(loss=f"{value:.4f}")
        bar.close()
        self._sync_buffers()
        epoch_s = time.perf_counter() - start
        # cores this process kept busy (training, loader and sampler threads), summed over
        # processes (split_process_counters): says whether one worker already used every core a
        # second one would need
        cores = (time.process_time() - cpu_start) / max(epoch_s, 1e-9)
        record = {"epoch": epoch + 1, **self._epoch_traffic(epoch_s, loss_sum, examples,
                                                            sync_s, cores)}
        weights_ok = all(bool(torch.isfinite(p).all()) for p in self.model.parameters())
        if not (math.isfinite(record["loss"]) and weights_ok):   # the same on every rank
            what = "loss" if weights_ok else "model weights"
            raise FloatingPointError(
                f"the training {what} became non-finite in epoch {epoch + 1}; stopped without "
                f"saving this epoch (the last good checkpoint in {self.config.run.dir} is kept); "
                "lower train.lr or check the input features")
        return record

    def _final(self) -> dict:
        if self.best is not None:
            self._restore(self.best)
        result = {"epochs": self.epoch + 1, "best_epoch": self.best_epoch + 1,
                  "workers": self.ctx.world_size, **self.best_eval}
        if self.history:           # the epochs this process ran (none if resumed at the end)
            result.update(final_loss=self.history[-1]["loss"],
                          epoch_s=float(np.mean([h["epoch_s"] for h in self.history])))
        result.update(self.evaluate(self.mode.final_splits))
        # the latest epoch's test metric beside the selected one's (e.g. AdaQP's adaptive
        # bit-widths act late, after the first 8-bit cycle)
        test = f"test_{self.mode.metric}"
        if test in self.last_eval:
            result[f"{test}_last"] = self.last_eval[test]
        result.update(self.mode.final_metrics())
        result["peak_rss_mb"] = self._peak_memory()
        self.run_dir.log("final", result)
        return result

    def evaluate(self, splits: tuple) -> dict:
        """The metrics of `splits`: the mode's outputs of every rank, gathered once (in
        rank order, concatenated per output) and scored by the mode."""
        outputs = gather_outputs(self.comm, self.mode.split_outputs(splits))
        return {k: v for split in splits for k, v in self.mode.score(split, outputs[split]).items()}

    def _peak_memory(self) -> float:
        """The most memory the run's worker processes have held, evaluation included,
        summed over processes (MB)."""
        mine = {"peak_rss_mb": allocator.peak_rss_mb(), "process": this_process()}
        ranks = split_process_counters(self.comm.all_gather_object(mine))
        return round(sum(r["peak_rss_mb"] for r in ranks), 1)

    # ------------------------------------------------------------------ traffic
    def _reset_traffic(self) -> dict:
        """This rank's Communicator counters since the last reset: {"train": the training
        group's (blocks the step), "fetch": the feature fetch group's (the loader thread's,
        overlapped with training)} where the mode has one."""
        fetch = self.ctx.fetch_comm
        return {"train": self.comm.reset_stats(),
                **({"fetch": fetch.reset_stats()} if fetch not in (None, self.comm) else {})}

    def _epoch_traffic(self, epoch_s: float, loss_sum: float, examples: int, sync_s: float,
                       cpu_cores: float) -> dict:
        """The epoch's time, loss and counters over all ranks: one gather of every rank's."""
        stats = self._reset_traffic()
        mine = {"epoch_s": epoch_s, "loss_sum": loss_sum, "examples": examples,
                "grad_sync_s": sync_s,
                "cpu_cores": round(cpu_cores, 3), "process": this_process(),
                "peak_rss_mb": round(allocator.peak_rss_mb(), 1),
                "comm_bytes_sent": sum(s.bytes_sent for s in stats.values()),
                "comm_bytes_recv": sum(s.bytes_recv for s in stats.values()),
                "comm_wait_s": stats["train"].wait_s, **self.mode.epoch_stats()}
        if "fetch" in stats and stats["fetch"].calls:
            mine["fetch_wait_s"] = stats["fetch"].wait_s
        ranks = split_process_counters(self.comm.all_gather_object(mine))
        record = combine_ranks(ranks, {**LOOP_REDUCTIONS, **self.mode.reductions})
        record["loss"] = record.pop("loss_sum") / max(record.pop("examples"), 1)
        if len(ranks) > 1:
            record["workers"] = [{"rank": r, **{k: v for k, v in m.items()
                                                if k not in ("loss_sum", "examples")}}
                                 for r, m in enumerate(ranks)]
        return record

    def _sync_buffers(self) -> None:
        """Average float buffers (batch-norm statistics) so every replica evaluates alike."""
        for buffer in self.model.buffers() if self.ctx.world_size > 1 else ():
            if buffer.is_floating_point():
                self.comm.all_reduce(buffer.data, op="mean")

    # ------------------------------------------------------------------ state
    def _snapshot(self) -> dict:
        return self.mode.stamped({"model": copy.deepcopy(self.model.state_dict()),
                                  "mode": copy.deepcopy(self.mode.state_dict())})

    def _restore(self, snapshot: dict) -> None:
        self.model.load_state_dict(snapshot["model"])
        self.mode.load_state_dict(snapshot["mode"])

    def _checkpoint(self) -> None:
        # an epoch that was just selected is its own snapshot: no second gather (temporal
        # memory) or copy, and the file holds it once
        current = self.best if self.best_epoch == self.epoch else self._snapshot()
        state = {"epoch": self.epoch, "best_val": self.best_val, "best_epoch": self.best_epoch,
                 "best": self.best, "best_eval": self.best_eval, "current": current,
                 "optimizer": self.optimizer.state_dict(),
                 "rng": self.comm.all_gather_object(_rng_state()), "config": self.config.to_dict(),
                 "dataset_files": self.dataset_files}
        self.run_dir.save_checkpoint(state)

    def _resume(self) -> None:
        """Continue from the checkpoint when run.resume is set (the launcher sets it when it
        restarts failed workers). Rank 0 reads the file and broadcasts it, so every rank
        resumes at the same epoch even if only rank 0 can see the run directory."""
        if not self.config.run.resume:
            return
        state = self.run_dir.load_checkpoint() if self.ctx.is_main else None
        state = self.comm.broadcast_object(state)
        if state is None:
            if self.ctx.attempt == 0:
                raise ConfigError(
                    f"run.resume is set but {self.run_dir.path} holds no checkpoint; drop "
                    "--resume (run.resume) to start a new run there")
            return                             # recovering before the first checkpoint
        changed = resume_changes(state.get("config"), self.config.to_dict(), self.run_dir.path)
        check_dataset_files(state.get("dataset_files", ""), self.dataset_files,
                            f"the checkpoint in {self.run_dir.path}",
                            "restore them, or drop --resume to start anew")
        older = self.mode.version_mismatch(state["current"])
        if older:
            raise ConfigError(f"the checkpoint in {self.run_dir.path} was written by {older}: "
                              "the epochs left would train otherwise than the first ones; "
                              "drop --resume to start anew, or finish the run with the "
                              "gnnsys that started it")
        try:
            self._restore(state["current"])
        except RuntimeError as err:            # e.g. another class count: size mismatch
            raise ConfigError(f"the checkpoint in {self.run_dir.path} holds a model this run's "
                              f"data no longer fits ({' '.join(str(err).split())[:160]}); "
                              "the dataset changed since the run started: restore it, or "
                              "drop --resume to start anew") from None
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:      # a changed lr / weight decay applies
            group.update(lr=self.config.train.lr, weight_decay=self.config.train.weight_decay)
        self.epoch, self.best_val = int(state["epoch"]), float(state["best_val"])
        self.best_epoch, self.best = int(state["best_epoch"]), state["best"]
        self.best_eval = state["best_eval"]
        rng = state["rng"]
        if len(rng) == self.ctx.world_size:
            _set_rng_state(rng[self.ctx.rank])
        self.run_dir.truncate_metrics_after(self.epoch + 1)
        self.run_dir.log("event", {"event": "resume", "from_epoch": self.epoch + 2,
                          "attempt": self.ctx.attempt, "changed": changed})
        if self.show and self._stopped_early():
            print(f"{self.run_dir.path}: stopped early after epoch {self.epoch + 1} (no better "
                  f"validation since epoch {self.best_epoch + 1}); nothing to train, testing the "
                  "selected model", flush=True)
        elif self.epoch + 1 >= self.config.train.epochs and self.show:
            print(f"{self.run_dir.path}: all {self.epoch + 1} epochs are done; nothing to "
                  "train (raise train.epochs to continue), testing the selected model",
                  flush=True)

    def _fail_here(self, epoch: int) -> bool:
        """The fault-test hook cluster.fail_at = "RANK:EPOCH" (first attempt only; epochs
        count from 1, as the epoch lines do)."""
        if not self.config.cluster.fail_at or self.ctx.attempt > 0:
            return False
        rank, at_epoch = (int(v) for v in self.config.cluster.fail_at.split(":"))
        return rank == self.ctx.rank and at_epoch == epoch + 1

    # ------------------------------------------------------------------ output
    def _print(self, record: dict) -> None:
        parts = [f"epoch {record['epoch']}: loss {record['loss']:.4f}",
                 f"{record['epoch_s']:.1f}s" + (f" (+{record['eval_s']:.1f}s evaluation)"
                                                 if "eval_s" in record else "")]
        if record.get("comm_bytes_sent"):
            parts.append(f"sent {record['comm_bytes_sent'] / 2 ** 20:.2f} MiB")
        if record.get("peak_rss_mb"):
            parts.append(f"peak memory {record['peak_rss_mb'] / 1024:.2f} GiB")
        if self.key in record:
            parts.append(f"{self.key} {record[self.key]:.4f}")
        print(", ".join(parts), flush=True)

    def _print_projection(self, record: dict, epochs_left: int) -> None:
        """What the first epoch cost and how long the rest takes at that pace: a run's
        length depends on the data, the model and the machine, so it is measured, not
        promised."""
        if epochs_left <= 0:
            return
        train = self.config.train
        epoch = record["epoch"]
        evals_left = sum(1 for e in range(epoch + 1, train.epochs + 1)
                         if e % train.eval_every == 0 or e == train.epochs)
        total = epochs_left * record["epoch_s"] + evals_left * record.get("eval_s", 0.0)
        cpu_s = record.get("cpu_cores", 0.0) * record["epoch_s"]
        notes = [] if "eval_s" in record or not evals_left else ["evaluation not counted"]
        if self._compiles_before_epoch != kernel_compiles() or train.compile:
            notes.append("it compiled kernels: later epochs are faster")
        if train.patience:
            notes.append("train.patience may stop the run sooner")
        print(f"epoch {epoch} took {record['epoch_s']:.1f} s of training ({cpu_s:.1f} CPU-s)"
              + (f" + {record['eval_s']:.1f} s of evaluation" if "eval_s" in record else "")
              + f"; {epochs_left} more epoch{'s' * (epochs_left != 1)} at that pace: "
              f"~{duration(total)}"
              + (f" ({'; '.join(notes)})" if notes else ""), flush=True)


def duration(seconds: float) -> str:
    """A run length for people: seconds, minutes or hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def check_dataset_files(was: str, now: str, since: str, fix: str) -> None:
    """Refuse dataset files whose content (`registry.dataset_files`) is not what the
    checkpoint recorded (`was`): a graph of the same shape would give wrong results
    without a word. '' on either side (generated or in-memory data): nothing to check."""
    if was and now and was != now:
        raise DatasetMismatch(f"the dataset's files changed since {since} (then: {was}; "
                              f"now: {now}); {fix}")


def resume_changes(old: dict, new: dict, where) -> dict:
    """{key: [old, new]} of the changed settings; one clear error if one may not change."""
    if not old:                                # a checkpoint that does not record its config
        return {}
    changed = changed_settings(old, new)
    frozen = [k for k in changed if not resumable(k)]
    if frozen:
        raise ConfigError(f"cannot resume the run in {where} with changed " + ", ".join(
            f"{k} ({changed[k][0]!r} -> {changed[k][1]!r})" for k in frozen)
            + "; restore them, or start a new run (another run.dir, or drop --resume)")
    return {k: v for k, v in changed.items() if k != "run.resume"}


def changed_settings(old: dict, new: dict, prefix: str = "") -> dict:
    """{dotted key: [old, new]} of the settings two config dicts hold differently."""
    out = {}
    for key in dict.fromkeys([*old, *new]):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out.update(changed_settings(a, b, f"{prefix}{key}."))
        elif a != b:
            out[f"{prefix}{key}"] = [a, b]
    return out


def combine_ranks(ranks: list[dict], reductions: dict) -> dict:
    """One value per key over ranks, as `reductions` declares for it (REDUCTIONS); a
    mapping combines entry by entry, and text (the same on every rank) is rank 0's."""
    out = {}
    for key in dict.fromkeys(k for r in ranks for k in r):
        how = reductions.get(key)
        if how not in REDUCTIONS:
            raise KeyError(f"epoch value {key!r} has no declared reduction ({how!r}); declare "
                           f"it in the mode's `reductions` as one of {', '.join(REDUCTIONS)}")
        out[key] = _reduce([r.get(key) for r in ranks], how)
    return out


def _reduce(values: list, how: str):
    value = next((v for v in values if v is not None), None)
    if isinstance(value, dict):
        keys = dict.fromkeys(k for v in values if v for k in v)
        return {k: _reduce([(v or {}).get(k) for v in values], how) for k in keys}
    if not isinstance(value, (int, float, np.number)) or isinstance(value, bool):
        return value
    numbers = [v for v in values if v is not None]
    combined = {"max": max, "sum": sum, "mean": lambda x: sum(x) / len(x)}[how](numbers)
    return round(combined, 6) if isinstance(combined, float) else combined


def _rng_state() -> dict:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(keys.astype(np.int64)),
            "numpy_pos": int(pos), "numpy_gauss": [int(has_gauss), float(cached)]}


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    keys = state["numpy_keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, state["numpy_pos"], *state["numpy_gauss"]))
