"""The answer checker runs wherever the generator runs: a user's maths dataset (math-verify, in
checker worker processes) trained on the default transport, the generator's own process."""

import dataclasses
import json
import random

from doubles import FakeGenerator
from scalerl.assembly.generator import Components
from scalerl.config import Config
from scalerl.configure import load_config
from scalerl.loop import train
from scalerl.run.metrics import read_rows
from scalerl.transport.protocol import GeneratorBuild, Stage


class GuessingGenerator(FakeGenerator):
    """Completions that think, then answer a digit at random in the format a file task asks for
    (`<answer>` tags): about one in ten is right."""

    def _finish(self, s):
        completion = super()._finish(s)
        return dataclasses.replace(
            completion, text=f"<think>{completion.text}</think><answer>{self.rng.randrange(10)}</answer>"
        )


def build_guessing(
    cfg_json: str,
    device: str,
    *,
    seed: int,
    model=None,
    tokenizer=None,
    task=None,
    reward=None,
    temperature=None,
    weights=None,
    local=False,
) -> Stage:
    """A `GeneratorBuild` function: the guessing generator, the run's real file task and real reward
    (in a generator process: all built there)."""
    from scalerl.models import load_model
    from scalerl.rewards import RewardFn, training_reward
    from scalerl.tasks import task_for_run

    cfg = Config.model_validate_json(cfg_json)
    if model is None:
        model, tokenizer = load_model("tiny-random", device=device)
    task = task or task_for_run(cfg, tokenizer, model)
    return Stage(
        GuessingGenerator(range(5, 40), (3, 8), 16, 0.0, seed),
        task,
        training_reward(reward or RewardFn(task, cfg.reward), cfg),
        cfg.run.seed,
    )


def test_a_maths_dataset_is_checked_in_the_generator_process(tmp_path, two_cores):
    from scalerl.models import load_model
    from scalerl.rewards import RewardFn
    from scalerl.tasks import task_for_run

    rng = random.Random(0)
    rows = []
    for i in range(200):
        a, b = rng.randrange(5), rng.randrange(5)
        rows.append({"prompt": f"{i}: {a}+{b}=", "answer": str(a + b)})
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        "scalerl",
        overrides=[
            "model.name=tiny-random",
            "task.name=file",
            f"task.path={data}",
            "task.val_size=16",
            "batch.prompts=8",
            "batch.generations=4",
            "eval.every=100",
            "eval.prompts=8",
            "eval.samples=1",
            "run.max_steps=3",
            "run.threads=2",
            "filter.zero_variance=false",
        ],
    )
    assert cfg.pipeline.transport == "auto"  # the default: a generator process on 2 cores
    model, tokenizer = load_model("tiny-random")
    task = task_for_run(cfg, tokenizer, model)
    assert task.isolate_checker  # math-verify, in checker worker processes

    comps = Components(
        model,
        tokenizer,
        task,
        RewardFn(task, cfg.reward),
        GeneratorBuild(build_guessing, (cfg.model_dump_json(), "cpu")),
    )
    (tmp_path / "run").mkdir()
    train(cfg, tmp_path / "run", comps=comps, progress=False)
    steps = [r for r in read_rows(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert len(steps) == 3
    assert all(r["train/reward_errors"] == 0 for r in steps)  # the checker ran, in the generator
    assert sum(r["train/pass_rate"] for r in steps) > 0  # and some answers passed
    assert all(r["train/no_answer_rate"] == 0.0 for r in steps)  # every one has its <answer> section
