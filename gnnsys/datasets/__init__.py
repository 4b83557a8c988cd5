"""Datasets by name: synthetic generators, offline bundles, and PyG/OGB/JODIE sources.

    from gnnsys.datasets import load_dataset, list_datasets
    g = load_dataset("cora")            # gnnsys.graph.Graph (static datasets)
    tg = load_dataset("wikipedia")      # gnnsys.temporal_graph.TemporalGraph (temporal ones)

Names are defined in the top-level `datasets.yaml`; files live under `data_root()`
(explicit root > $GNNSYS_DATA > ~/.cache/gnnsys). Nothing here downloads: a dataset whose
files are missing raises DatasetError naming the files and where to put them.
"""
from gnnsys.errors import DatasetError
from gnnsys.datasets.registry import DatasetInfo, data_root, list_datasets, load_dataset
from gnnsys.datasets.for_run import load_run_graph

__all__ = ["DatasetError", "DatasetInfo", "data_root", "list_datasets", "load_dataset",
           "load_run_graph"]
