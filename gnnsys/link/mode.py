"""Link mode plug-in: link prediction on static graphs (task `link`, data kind `static`).

The dataset's undirected edges are split once (`link.val` / `link.test` of them held out,
seeded by `link.split_seed`; `gnnsys.datasets.splits.random_edge_split`). What each phase
may see, as OGB states it for its link datasets:
- training batches sample their neighbourhoods from the training edges only, and take
  their positive pairs from them (a pair is in its own batch's message passing, as in
  PyG's and DGL's link examples); negatives are drawn per batch (`link.negatives`);
- validation and test embed every node over the training edges only, then score their
  held-out positives against negatives none of which is an edge of the whole graph.

Every scored split reports AUC and AP with one negative per positive (GAE's protocol),
Hits@20/50/100 of the positives against that whole negative set (OGB's `collab` style),
and MRR of each positive (u, v) against `link.eval_negatives` fixed pairs (u, w), w
uniform (OGB's `citation2` style, unfiltered). `link.metric` selects the best epoch.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from ..metrics import average_precision, hits_at, mean_reciprocal_rank, roc_auc
from ..mode import Mode
from ..models.registry import archs, decoder_class
from ..runlog import progress
from .loader import EdgeLoader
from samplers.temporal import shard

HITS = (20, 50, 100)
SCORE_CHUNK = 1 << 16            # pairs decoded at once in evaluation


class LinkModel(nn.Module):
    """A minibatch model as the node encoder (its output rows are the embeddings) and a
    decoder scoring pairs of them; one module, so optimizer, checkpoints and gradient
    sync see every parameter. With `node_vectors` (link.node_embedding) the encoder reads
    a learned row per node instead of the features."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module,
                 node_vectors: nn.Embedding | None = None):
        super().__init__()
        self.encoder, self.decoder, self.node_vectors = encoder, decoder, node_vectors

    def forward(self, batch) -> torch.Tensor:
        """The embeddings of a `MiniBatch`'s seeds (its x the encoder's input: `with_input`)."""
        return self.encoder(batch.x, batch.blocks, batch.n_id, batch.x_agg)

    def with_input(self, batch):
        """`batch` holding the learned node vectors of its nodes as x, where the model has
        them (the sampler gathered no features then)."""
        if self.node_vectors is None:
            return batch
        return dataclasses.replace(batch, x=self.node_vectors(batch.n_id))

    def input_graph(self, graph):
        """`graph` with the rows the encoder reads as its features (for inference)."""
        if self.node_vectors is None:
            return graph
        return dataclasses.replace(graph, x=self.node_vectors.weight.detach().cpu().numpy())

    def score(self, h: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """Logits of `pairs` ([2, B] rows of h)."""
        return self.decoder(h[pairs[0]], h[pairs[1]])


class LinkMode(Mode):
    task = "link"
    data_kind = "static"
    # what a finished run answers: pair scores, each node's best partners, node embeddings
    # (`RunResult.predict(pairs=)`, `.topk`, `.embeddings`; gnnsys/prediction.py `link_*`)
    predicts = "pairs"
    grad_op = "sum"              # each rank's loss is its slice's sum over the global batch size
    supports = {"model.arch": archs("link"), "train.compile": (False,)}
    eval_splits = ("val",)
    final_splits = ("val", "test")

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        from ..minibatch.mode import check_sampled_model
        check_sampled_model(config)
        if config.link.val + config.link.test >= 1:
            raise ConfigError(f"config keys 'link.val' + 'link.test' are "
                              f"{config.link.val + config.link.test:g}, leaving no training "
                              "edge; keep their sum under 1")

    @staticmethod
    def prepare(config, graph=None) -> tuple:
        return () if graph is None else (graph,)

    def __init__(self, ctx, config, graph=None):
        super().__init__(ctx, config)
        from .data import LinkData
        from ..minibatch.loader import fused_sampler
        self.data = d = LinkData(config, graph)
        s = config.sampler
        # learned node vectors are looked up by the model: the sampler gathers no row then
        features = None if config.link.node_embedding else d.graph.x
        self.sampler = fused_sampler(config, d.graph.indptr, d.graph.indices, features,
                                     threads=s.threads)
        self.loader = EdgeLoader(self.sampler, d.train_pairs, d.graph.degree(), s.batch_size,
                                 negatives=config.link.negatives, prefetch=s.prefetch,
                                 seed=config.train.seed, rank=ctx.rank,
                                 world_size=ctx.world_size,
                                 epoch_pairs=config.link.epoch_pairs, device=ctx.device)
        self.batches_per_epoch = len(self.loader)
        self.wait_s, self.step_checked = 0.0, False

    @property
    def metric(self) -> str:
        return self.config.link.metric

    def build_model(self) -> LinkModel:
        from ..models import build_model
        from ..step_memory import check_step_fits, shapes_only
        c, g = self.config, self.data.graph

        width = c.link.node_embedding

        def build():
            encoder = build_model(c, width or g.num_features, c.model.hidden, g.num_nodes)
            decoder = decoder_class(c.link.decoder)(c.model.hidden, c.model.dropout)
            vectors = nn.Embedding(g.num_nodes, width) if width else None
            if vectors is not None:
                nn.init.xavier_uniform_(vectors.weight)     # as OGB's ddi examples
            return LinkModel(encoder, decoder, vectors)
        check_step_fits(shapes_only(build), 0, "", "model.hidden or model.layers")
        self.model = build()
        self.model.encoder.set_degree(g.degree())
        self.model.encoder.set_adjacency(lambda: (g.indptr, g.indices, None))
        return self.model.to(self.ctx.device)

    def train_batches(self, epoch: int):
        """(loss, this rank's positive pairs, the batch's) per batch: the positives' and the
        negatives' mean binary cross-entropy over the whole batch, summed (OGB's
        link-prediction loss); a rank's share is its slice's sums over the batch's size,
        so the ranks' gradients add up to one process's."""
        from ..minibatch.mode import check_batch_step_fits
        ready = time.perf_counter()
        for step, lb in enumerate(self.loader.epoch(epoch)):
            self.wait_s += time.perf_counter() - ready
            batch = self.model.with_input(lb.batch)
            if not self.step_checked:
                check_batch_step_fits(self.model, self.model.encoder, batch, self.config)
                self.step_checked = True
            with self._dropout_stream(epoch, step):
                h = self.model(batch)
                pos, neg = self.model.score(h, lb.pos), self.model.score(h, lb.neg)
            loss = (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
                    + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg),
                                                         reduction="sum")) / lb.global_count
            yield loss, lb.num_pairs, lb.global_count
            ready = time.perf_counter()

    @contextlib.contextmanager
    def _dropout_stream(self, epoch: int, step: int):
        """The step's forward draws its dropout masks from a generator seeded by (run seed,
        epoch, step, rank), torch's own state kept outside: each rank's masks differ (K
        workers seeded alike would otherwise drop the same positions of their slices
        together) and a resumed run draws what an uninterrupted one does."""
        devices = [self.ctx.device] if self.ctx.device.type == "cuda" else []
        seed = np.random.SeedSequence([self.config.train.seed, epoch, step, self.ctx.rank])
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(seed.generate_state(1, np.uint64)[0] >> np.uint64(1)))
            yield

    def epoch_stats(self) -> dict:
        stats, self.wait_s = {"batch_wait_s": round(self.wait_s, 4)}, 0.0
        return stats

    reductions = {"batch_wait_s": "max"}

    def embeddings(self, layers: int | None = None) -> torch.Tensor:
        """Every node's embedding (or its first `layers` layers' output) over the training
        edges, by exact layer-wise inference."""
        show = self.config.train.progress and self.ctx.is_main
        bar = (lambda it, desc: progress(it, desc=desc, enabled=show, unit="batch"))
        return self.model.encoder.inference(self.model.input_graph(self.data.graph),
                                            self.config.sampler.eval_batch_size,
                                            self.ctx.device, progress=bar, layers=layers)

    def pair_scores(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The logits of node-row pairs (src[i], dst[i]) (`RunResult.predict(pairs=...)`)."""
        return self.score_pairs(self.embeddings(), torch.from_numpy(src),
                                torch.from_numpy(dst)).numpy()

    @torch.no_grad()
    def top_partners(self, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """For each node row of `rows`: the k rows it scores highest with and their logits
        ([len(rows), k] each, best first), leaving out itself and every node it has an
        edge to in the dataset (training or held out)."""
        from ..errors import PredictError
        known_indptr, known = self.data.known_edges
        free = self.data.graph.num_nodes - 1 - np.diff(known_indptr)[rows]
        if k < 1 or k > free.min():
            raise PredictError(f"top {k}: give 1 <= k <= {int(free.min())} (node "
                               f"{int(rows[np.argmin(free)])} has that many unlinked nodes)")
        h = self.embeddings().to(self.ctx.device)
        self.model.eval()
        per_chunk = max(1, (1 << 26) // len(h))     # ~256 MB of scores at a time
        partners, scores = [], []
        for start in range(0, len(rows), per_chunk):
            chunk = rows[start:start + per_chunk]
            score = self.model.decoder.score_all(h[torch.from_numpy(chunk)], h).cpu()
            for i, row in enumerate(chunk):
                linked = np.asarray(known[known_indptr[row]:known_indptr[row + 1]], np.int64)
                score[i, torch.from_numpy(linked)] = -float("inf")
                score[i, int(row)] = -float("inf")
            best = torch.topk(score, k, dim=1)
            partners.append(best.indices.numpy())
            scores.append(best.values.numpy())
        return np.concatenate(partners), np.concatenate(scores)

    @torch.no_grad()
    def score_pairs(self, h: torch.Tensor, src, dst) -> torch.Tensor:
        """Logits of pairs (src[i], dst[i]) of embedding rows h, chunk by chunk."""
        self.model.eval()
        src, dst = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
        out = [self.model.decoder(h[src[i:i + SCORE_CHUNK]].to(self.ctx.device),
                                  h[dst[i:i + SCORE_CHUNK]].to(self.ctx.device)).cpu()
               for i in range(0, len(src), SCORE_CHUNK)]
        return torch.cat(out) if out else torch.empty(0)

    def split_outputs(self, splits: tuple) -> dict:
        """Per split the logits of its positives, of its negatives, and of each positive's
        ranking negatives ([P, link.eval_negatives]): with K workers this rank's contiguous
        slice of each (every rank embeds every node), gathered in rank order."""
        h = self.embeddings()
        out = {}
        mine = (lambda a: a[..., slice(*shard(0, a.shape[-1], self.ctx.rank,
                                              self.ctx.world_size))])
        for split in splits:
            pos, neg, fakes = self.data.held_out(split)
            pos, neg, fakes = mine(pos), mine(neg), mine(fakes.T).T
            ranked = self.score_pairs(h, np.repeat(pos[0], fakes.shape[1]), fakes.reshape(-1))
            out[split] = {"pos": self.score_pairs(h, *pos), "neg": self.score_pairs(h, *neg),
                          "ranked": ranked.reshape(fakes.shape)}
        return out

    def score(self, split: str, outputs: dict) -> dict:
        pos, neg = outputs["pos"].numpy(), outputs["neg"].numpy()
        scores = np.concatenate([pos, neg])
        labels = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
        result = {f"{split}_auc": roc_auc(scores, labels),
                  f"{split}_ap": average_precision(scores, labels),
                  f"{split}_mrr": mean_reciprocal_rank(pos, outputs["ranked"].numpy())}
        result.update({f"{split}_hits{k}": hits_at(pos, neg, k) for k in HITS})
        return result

    def describe(self) -> dict:
        return self.data.describe()

    def split_ids(self) -> dict:
        return self.data.split_keys()
