"""`train.compile`: the compiled temporal model trains to the eager one's weights and
metrics (dropout 0, so both runs draw the same random numbers), and modes that do not
support it, or a machine without a C++ compiler, are refused up front."""
from __future__ import annotations

import pytest
import torch

from gnnsys.config import ConfigError, from_dict
from gnnsys.testing import tiny_temporal_graph
from gnnsys.training import fit


# every arch: `train.compile: true` is one key away in the TGN configs, which name the
# others as one-key switches too (TGN compiled runs its fused attention op through dynamo)
@pytest.mark.parametrize("arch", ["tgn", "jodie", "apan"])
def test_compiled_temporal_model_trains_like_eager(arch, tiny_config, tmp_path):
    from torch._dynamo.utils import counters
    graph = tiny_temporal_graph()
    runs = {}
    counters.clear()
    for compiled in (False, True):
        cfg = tiny_config(run={"dir": str(tmp_path / f"compiled{compiled}")},
                          train={"compile": compiled, "epochs": 2}, model={"arch": arch},
                          temporal={"pair_history": True})
        runs[compiled] = fit(cfg, graph)
        assert (counters["stats"]["unique_graphs"] > 0) == compiled   # it really compiled
    assert runs[True]["test_ap"] == pytest.approx(runs[False]["test_ap"], abs=2e-3)
    eager, compiled = (torch.load(tmp_path / f"compiled{c}" / "checkpoint.pt",
                                  weights_only=True)["current"]["model"] for c in (False, True))
    assert eager.keys() == compiled.keys()          # in-place: no "_orig_mod." prefixes
    for name, value in eager.items():
        torch.testing.assert_close(compiled[name], value, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("mode", ["minibatch", "fullgraph"])
def test_compile_is_refused_where_the_mode_does_not_support_it(mode):
    with pytest.raises(ConfigError, match="train.compile"):
        from_dict({"mode": mode, "train": {"compile": True}})


def test_compile_without_a_cxx_compiler_is_one_clear_error(tiny_config, tmp_path, monkeypatch):
    import torch._inductor.cpp_builder as cpp_builder

    def no_compiler():
        raise RuntimeError("no working C++ compiler found")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    cfg = tiny_config(run={"dir": str(tmp_path / "run")}, train={"compile": True})
    with pytest.raises(ConfigError, match="needs a C.. compiler .*train.compile: false"):
        fit(cfg, tiny_temporal_graph())
    assert not (tmp_path / "run").exists()           # refused before anything was written
