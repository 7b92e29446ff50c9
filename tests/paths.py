"""Where the tests find their data: the specification's examples are copied into tests/data/examples."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "tests" / "data" / "examples"
SCENARIOS = EXAMPLES / "scenarios"
SEEDS = EXAMPLES / "seed"
