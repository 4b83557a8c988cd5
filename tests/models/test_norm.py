"""`model.norm` is the one normalisation knob: every model builds its layers from it."""
import pytest
from torch import nn

from gnnsys.fullgraph.model import FullGraphGNN
from gnnsys.models import BlockGNN


@pytest.mark.parametrize("norm, layer", [("none", nn.Identity), ("layer", nn.LayerNorm),
                                         ("batch", nn.BatchNorm1d)])
@pytest.mark.parametrize("model", [BlockGNN, FullGraphGNN])
def test_the_norm_knob_builds_the_same_layers_in_every_model(model, norm, layer):
    built = model("sage", 4, 8, 3, layers=3, norm=norm)
    assert [type(m) for m in built.norms] == [layer, layer]
    assert all(m.weight.shape == (8,) for m in built.norms if norm != "none")
