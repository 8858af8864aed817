"""Typed configuration of a run: one class per component, bounds checked on load.

A recipe (scalerl, grpo, dapo, ...) is a YAML preset of `Config` under `scalerl/recipes/`:
a partial override of the defaults, which are the ScaleRL recipe (paper Section 4).
Variants are discriminated unions keyed by `type` (`loss: {type: cispo, eps_max: 5}`).
Unknown keys are errors (`extra="forbid"`), never silently ignored; the message names the
key, where it came from, and the closest valid keys.

The schema is split by component, one module each; every name is re-exported here
(`from scalerl.config import Config, RolloutConfig`):
  model       `model`: the model, its precision, LoRA
  tasks       `task`: the kinds of task (a union by `type`), `expand_task`, `task_config`
  task_names  a task's short name (`task.name=rg:chain_sum`) read and written back
  reward      `reward` and `sandbox`
  rollout     `rollout`: sampling, length control, the generation engine
  train       `batch`, `advantage`, `filter`, `curriculum`, `loss`, `optim`
  pipeline    `pipeline`, `ray`, `trainer`: where generator and trainer run
  eval        `eval`: the held-out evaluation and its schedule
  run         `run`, and `Config`: every section together, with the checks across sections
  recipes     the shipped presets, the resolved config as YAML
  base        what every section is; walking the schema
  merge       merging one layer into another and naming the layer at fault (not re-exported)
Resolution (`load_config`: defaults -> recipe -> file -> `--set` -> the model-dependent profile), the
profiles and the CLI flags are in `scalerl.configure`, which reads the model's facts.

Departures from the paper: none in the schema itself; the tiny-model defaults (batch 32 x 8,
lr 5e-5, 160-token budget) are scaled down from the paper's 48 x 16, 5e-7 and 16k tokens
(Section 2) so that the default run fits a laptop CPU.
"""

from scalerl.config.base import lookup, section_of, variants_of
from scalerl.config.eval import EvalConfig, eval_schedule
from scalerl.config.model import LoraConfig, ModelConfig
from scalerl.config.pipeline import PipelineConfig, RayConfig, TrainerConfig
from scalerl.config.recipes import RECIPES_DIR, dump_config, list_recipes, recipe_path
from scalerl.config.reward import RewardConfig, SandboxConfig
from scalerl.config.rollout import (
    DEFAULT_PHRASE,
    PAPER_PHRASE,
    EngineConfig,
    InterruptConfig,
    LengthControl,
    LengthPenaltyConfig,
    LocalEngineConfig,
    NoLengthControl,
    RolloutConfig,
    VllmEngineConfig,
)
from scalerl.config.run import Config, RunConfig, available_cores
from scalerl.config.task_names import FILE_SUFFIXES, SHORTHANDS, shorthand, task_name
from scalerl.config.tasks import (
    COLUMN_ROLES,
    DEFAULT_VAL_SIZE,
    LEGACY_DEFAULTS,
    TASK_KINDS,
    ArithTaskConfig,
    CodeExprTaskConfig,
    CodeTaskConfig,
    FileTaskConfig,
    MixTaskConfig,
    PythonTaskConfig,
    RgTaskConfig,
    TaskConfig,
    TaskPart,
    expand_task,
    task_config,
)
from scalerl.config.train import (
    MAX_COMPLETIONS,
    MAX_GENERATIONS,
    MAX_PROMPTS,
    AdvantageConfig,
    Aggregation,
    BatchConfig,
    CispoLoss,
    CurriculumConfig,
    CustomLoss,
    FilterConfig,
    GSPOLoss,
    LossConfig,
    OptimConfig,
    PPOClipLoss,
    ReinforceLoss,
)

__all__ = [
    "Config",
    "ModelConfig",
    "LoraConfig",
    "RewardConfig",
    "SandboxConfig",
    "RunConfig",
    "EvalConfig",
    "PipelineConfig",
    "RayConfig",
    "TrainerConfig",
    "TaskConfig",
    "TaskPart",
    "TASK_KINDS",
    "ArithTaskConfig",
    "CodeExprTaskConfig",
    "FileTaskConfig",
    "CodeTaskConfig",
    "RgTaskConfig",
    "MixTaskConfig",
    "PythonTaskConfig",
    "COLUMN_ROLES",
    "DEFAULT_VAL_SIZE",
    "LEGACY_DEFAULTS",
    "FILE_SUFFIXES",
    "SHORTHANDS",
    "expand_task",
    "task_config",
    "shorthand",
    "task_name",
    "RolloutConfig",
    "LengthControl",
    "InterruptConfig",
    "LengthPenaltyConfig",
    "NoLengthControl",
    "EngineConfig",
    "LocalEngineConfig",
    "VllmEngineConfig",
    "DEFAULT_PHRASE",
    "PAPER_PHRASE",
    "BatchConfig",
    "AdvantageConfig",
    "FilterConfig",
    "CurriculumConfig",
    "LossConfig",
    "Aggregation",
    "CispoLoss",
    "PPOClipLoss",
    "GSPOLoss",
    "ReinforceLoss",
    "CustomLoss",
    "OptimConfig",
    "MAX_PROMPTS",
    "MAX_GENERATIONS",
    "MAX_COMPLETIONS",
    "eval_schedule",
    "available_cores",
    "variants_of",
    "section_of",
    "lookup",
    "RECIPES_DIR",
    "list_recipes",
    "recipe_path",
    "dump_config",
]
