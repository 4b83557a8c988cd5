"""What a multi-worker launch says before it starts Ray (no Ray is started here)."""
import logging

import pytest

from gnnsys.distributed import launcher


class RayNotStarted(Exception):
    pass


def _launch_until_ray(config, monkeypatch):
    def stop(config):
        raise RayNotStarted
    monkeypatch.setattr(launcher, "init_ray", stop)
    with pytest.raises(RayNotStarted):
        launcher.launch(lambda ctx, config: None, config)


@pytest.mark.parametrize("threads, warned", [(1, False), (2, True)])
def test_more_worker_threads_than_cores_is_one_warning(tmp_path, dist_config, monkeypatch,
                                                       caplog, threads, warned):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(launcher, "machine_cores", lambda: 2, raising=False)
    caplog.set_level(logging.WARNING, logger="gnnsys")
    _launch_until_ray(dist_config(tmp_path, sampler={"threads": threads}), monkeypatch)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ([f"2 workers x {threads} threads (sampler.threads) = 4 threads on this "
                      "machine's 2 cores: the workers will wait on each other; lower "
                      "sampler.threads or cluster.workers"] if warned else [])
