"""kube-scheduler's score scale (0–100) and the two ways its plugins normalize raw scores onto it."""

from __future__ import annotations

from collections.abc import Mapping

MAX_NODE_SCORE = 100


def min_max_normalized(raw: Mapping[str, int]) -> dict[str, int]:
    """InterPodAffinity's NormalizeScore: min-max scaled to 0-100 (all 0 when every node scored the same)."""
    if not raw:
        return {}
    low, high = min(raw.values()), max(raw.values())
    if high == low:
        return dict.fromkeys(raw, 0)
    return {name: int(MAX_NODE_SCORE * (score - low) / (high - low)) for name, score in raw.items()}


def scaled_to_max(raw: Mapping[str, int]) -> dict[str, int]:
    """kube's DefaultNormalizeScore: each score × 100 / the highest (all 0 when the highest is 0)."""
    high = max(raw.values(), default=0)
    return {name: score * MAX_NODE_SCORE // high if high > 0 else 0 for name, score in raw.items()}
