"""Training modes: each module exposes fit(config) -> dict of final metrics."""
