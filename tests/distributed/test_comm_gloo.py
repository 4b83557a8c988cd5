"""gnnsys.distributed.comm.Communicator over a real torch.distributed group: 2 processes,
gloo, rendezvous through a file. Results (all-reduce mean and max, gradient sync, blocking
and asynchronous all-to-all, objects) and the byte/row accounting, checked per rank."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gnnsys.distributed.comm import Communicator

ROW = 3                                  # float32 columns: 12 bytes a row
COUNTS = [[1, 2], [3, 0]]                # COUNTS[s][r]: rows rank s sends rank r


def rows(sender: int, receiver: int) -> torch.Tensor:
    n = COUNTS[sender][receiver]
    return torch.arange(n * ROW, dtype=torch.float32).view(n, ROW) + 100 * sender + 10 * receiver


def overlapped_model():
    torch.manual_seed(0)
    return torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])


def overlapped_loss(model, rank: int, step: int) -> torch.Tensor:
    """Layers 0 and 2 always; layer 1 only on rank 0 (unused on rank 1: its bucket is
    posted in finish() there, and in backward on rank 0)."""
    h = torch.arange(8.0).view(2, 4) * (rank + 1) + step
    h = model[0](h)
    if rank == 0:
        h = model[1](h)
    return model[2](h).pow(2).sum()


def overlapped_backward(comm, rank: int) -> list:
    """Two steps of backward with the bucketed, overlapped sync (buckets of one tensor)."""
    model = overlapped_model()
    sync = comm.gradient_sync(model.parameters(), "mean", bucket_bytes=1)
    grads = []
    for step in range(2):
        model.zero_grad(set_to_none=False)
        overlapped_loss(model, rank, step).backward()
        sync.finish()
        grads.append([p.grad.clone() for p in model.parameters()])
    sync.close()
    return grads


def battery(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    comm, out = Communicator(rank, 2), {}
    try:
        out["mean"] = comm.all_reduce(torch.tensor([rank + 1.0, 10.0 * (rank + 1)]), "mean")
        out["max"] = comm.all_reduce(torch.tensor([float(rank), -float(rank)]), "max")
        out["after_reduce"] = comm.reset_stats()
        out["recv"] = comm.all_to_all([rows(rank, r) for r in range(2)])
        out["after_all_to_all"] = comm.reset_stats()
        pending = comm.start_all_to_all([rows(rank, r) for r in range(2)],
                                        [COUNTS[s][rank] for s in range(2)])
        out["recv_async"] = pending.wait()
        out["after_async"] = comm.reset_stats()
        layer = torch.nn.Linear(2, 1)
        layer.weight.grad = torch.full_like(layer.weight, float(rank))   # bias: no gradient
        comm.all_reduce_gradients(layer.parameters(), "mean")
        out["grads"] = (layer.weight.grad.clone(), layer.bias.grad.clone())
        out["overlapped"] = overlapped_backward(comm, rank)
        out["gathered"] = comm.all_gather_object({"rank": rank})
        out["broadcast"] = comm.broadcast_object(f"from {rank}", src=1)
        comm.barrier()
    finally:
        dist.destroy_process_group()
    torch.save(out, f"{out_dir}/rank{rank}.pt")


def test_communicator_over_two_gloo_processes(tmp_path):
    mp.spawn(battery, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        out = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert out["mean"].tolist() == [1.5, 15.0]
        assert out["max"].tolist() == [1.0, 0.0]
        reduce = out["after_reduce"]                      # two 8-byte tensors each way
        assert (reduce.bytes_sent, reduce.bytes_recv, reduce.calls) == (16, 16, 2)
        for key in ("recv", "recv_async"):
            assert [t.shape[0] for t in out[key]] == [COUNTS[s][rank] for s in range(2)]
            for sender in range(2):
                assert torch.equal(out[key][sender], rows(sender, rank)), (key, sender)
        other = 1 - rank
        sent, got = COUNTS[rank][other], COUNTS[other][rank]     # the self part is no traffic
        blocking, posted = out["after_all_to_all"], out["after_async"]
        assert (blocking.rows_sent, blocking.rows_recv) == (sent, got)
        assert blocking.bytes_sent == sent * 4 * ROW + 8          # + the counts message
        assert blocking.bytes_recv == got * 4 * ROW + 8
        assert (posted.rows_sent, posted.rows_recv) == (sent, got)
        assert (posted.bytes_sent, posted.bytes_recv) == (sent * 4 * ROW, got * 4 * ROW)
        weight, bias = out["grads"]
        assert weight.tolist() == [[0.5, 0.5]] and bias.tolist() == [0.0]
        # overlapped buckets == the mean of each rank's own gradients, computed here
        for step, got in enumerate(out["overlapped"]):
            per_rank = []
            for r in range(2):
                model = overlapped_model()
                overlapped_loss(model, r, step).backward()
                per_rank.append([torch.zeros_like(p) if p.grad is None else p.grad
                                 for p in model.parameters()])
            for g, a, b in zip(got, *per_rank):
                torch.testing.assert_close(g, (a + b) / 2)
        assert out["gathered"] == [{"rank": 0}, {"rank": 1}]
        assert out["broadcast"] == "from 1"
