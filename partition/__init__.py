"""Partitioners and the on-disk partition format (no dependency on gnnsys trainers)."""
