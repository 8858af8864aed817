"""scalerl: predictable reinforcement-learning post-training of language models.

Stages, one subpackage each, in data-flow order:
    tasks -> rollout -> rewards -> transport -> batching -> trainer (rl: advantages, losses) -> loop -> run
and, beside them, `scaling` (the compute-performance curve fits; torch-free).
"""

__version__ = "0.1.0"
