"""Per-worker feature storage for partitioned training (SALIENT++'s VIP cache).

`FeatureStore` holds one worker's rows (its own part in VIP order, then the cached remote
rows) and fills a batch's missing rows from their owners; `policy` picks what to cache;
`access` measures what an epoch really reads; `gnnsys.partition_cache` finds or builds the
partitions.
"""
from .access import CacheEffect, cache_effect, epoch_access_counts
from .feature_store import FeatureStore
from .fetch import RemoteFetcher
from .policy import POLICIES, cache_weights, select_cache

__all__ = ["CacheEffect", "FeatureStore", "POLICIES", "RemoteFetcher", "cache_effect",
           "cache_weights", "epoch_access_counts", "select_cache"]
