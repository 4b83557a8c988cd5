"""`model.norm`: the layer between hidden layers, in every model that has one."""
from torch import nn

NORM_LAYERS = {"none": nn.Identity, "layer": nn.LayerNorm, "batch": nn.BatchNorm1d}
NORMS = tuple(NORM_LAYERS)
