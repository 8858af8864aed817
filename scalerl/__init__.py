"""scalerl: predictable reinforcement-learning post-training of language models.

The data flow of a run: tasks -> rollout (generate) -> rewards (score) -> transport -> batching
(filter) -> trainer (advantages, loss, step; the maths in `rl`) -> back to rollout (weights),
driven by `loop` and assembled by `assembly`; its record is the run directory (`run`), which `scaling`
fits and forecasts (torch-free). The layers, the CLI down to the pure maths, are enforced by the
import contract in pyproject.toml (docs/design.md, "Layers").
"""

__version__ = "0.1.0"
