"""reasoning-gym tasks: prompts, scoring, pools, mixes, bad input, and a few training steps."""

from collections import Counter

import pytest

from scalerl.assembly.generator import build_components
from scalerl.cli import main
from scalerl.config import RewardConfig, task_config
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.loop import train
from scalerl.rewards import RewardFn
from scalerl.run.metrics import read_rows
from scalerl.tasks import get_task
from scalerl.types import Completion

pytest.importorskip("reasoning_gym")

# five kinds: arithmetic, counting, sorting, logic, a puzzle (questions within the tiny model's context)
KINDS = ["chain_sum", "letter_counting", "word_sorting", "knights_knaves", "maze"]


def _completion(text: str) -> Completion:
    return Completion(
        id="c", prompt_id="p", prompt_tokens=[], tokens=[], logprobs=[], versions=[], text=text, finish_reason="eos"
    )


class _ChatTokenizer:
    chat_template = "set"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|>"


@pytest.mark.parametrize("name", KINDS)
def test_prompts_and_scoring_follow_reasoning_gym(name):
    import reasoning_gym

    task = get_task(task_config(name=f"rg:{name}", train_size=20, val_size=8, seed=3), _ChatTokenizer())
    ref = reasoning_gym.create_dataset(name, seed=3, size=80)
    p = task.train_prompt(0)
    assert p.meta["question"] == ref[0]["question"] and p.answer == ref[0]["answer"]
    assert (
        p.text.startswith("<|system|>")
        and "<answer>" in p.text
        and p.text.endswith(f"<|user|>{ref[0]['question']}<|assistant|>")
    )
    assert p.id == f"rg:{name}/s3/train/0"
    assert len(task) == 20 and len(task.val_prompts(8)) == 8
    assert {q.meta["question"] for q in task.val_prompts(8)}.isdisjoint(
        task.train_prompt(i).meta["question"] for i in range(20)
    )
    fn = RewardFn(task, RewardConfig())
    right, wrong, cut = (
        _completion(f"I think.\n<answer>{p.answer}</answer>"),
        _completion("<answer>zzz</answer>"),
        _completion(f"<answer>{p.answer}"),
    )
    scores = [fn(p, c) for c in (right, wrong, cut)]
    assert [s.passed for s in scores] == [True, False, False]
    assert [s.reward for s in scores] == [1.0, -1.0, -1.0]


def test_thinking_format_opens_think_and_reads_the_answer_after_it():
    task = get_task(task_config(name="rg:chain_sum", train_size=10, val_size=4), _ChatTokenizer(), think=True)
    p = task.train_prompt(0)
    assert "<think>" in p.text.split("<|user|>")[0] and p.text.endswith("<|assistant|><think>\n")
    fn = RewardFn(task, RewardConfig())
    c = _completion(f"so <answer>{p.answer}</answer> hmm, time is up.</think><answer>{p.answer}</answer>")
    assert fn(p, c).passed
    marked = get_task(task_config(name="rg:chain_sum", train_size=10, val_size=4, answer_marker="</think>"))
    unfinished = _completion(f"<think>maybe <answer>{p.answer}</answer> or")  # cut before </think>
    assert RewardFn(marked, RewardConfig())(p, unfinished).passed is False


def test_shots_show_solved_examples_kept_out_of_pool_and_validation():
    import reasoning_gym

    task = get_task(task_config(name="rg:chain_sum", train_size=30, val_size=8, seed=3, shots=2), _ChatTokenizer())
    shots = reasoning_gym.create_dataset("chain_sum", seed=3 + 2_000_006, size=8)  # the third seed's first two
    p = task.train_prompt(0)
    turns = [f"<|user|>{shots[i]['question']}<|assistant|><answer>{shots[i]['answer']}</answer>" for i in (0, 1)]
    assert p.text.startswith("<|system|>") and "".join(turns) in p.text
    assert p.text.endswith(f"<|user|>{p.meta['question']}<|assistant|>")
    asked = {task.train_prompt(i).meta["question"] for i in range(30)} | {
        q.meta["question"] for q in task.val_prompts(8)
    }
    assert not asked & {shots[0]["question"], shots[1]["question"]}
    with pytest.raises(ScaleRLError, match=r"task.shots is not a field of task type 'arith' \(it belongs to type file"):
        get_task(task_config(name="arith", shots=1))


def test_partial_credit_and_threshold_use_the_dataset_score():
    task = get_task(task_config(name="rg:chain_sum", train_size=10, val_size=4))
    p = task.train_prompt(0)
    half = f"<answer>{p.answer}{'x' * len(p.answer)}</answer>"  # base score_answer: len(oracle)/len(answer) = 0.5
    strict, lenient = RewardFn(task, RewardConfig()), RewardFn(task, RewardConfig(threshold=0.5))
    partial = RewardFn(task, RewardConfig(partial_credit=True))
    results = []
    for fn in (strict, lenient, partial):
        s = fn(p, _completion(half))
        results.append((s.passed, s.reward))
    assert results == [(False, -1.0), (True, 1.0), (False, -1.0 + 0.5 * 2.0)]


def test_mix_draws_in_its_weights_proportions():
    task = get_task(task_config(name="rg:chain_sum,leg_counting", weights=[3, 1], train_size=800, val_size=16))
    counts = Counter(task.train_prompt(i).meta["subset"] for i in range(len(task)))
    share = counts["chain_sum"] / len(task)
    assert abs(share - 0.75) < 0.05, counts  # binomial sd at n=800: 0.015
    even = get_task(task_config(name="rg:chain_sum,leg_counting", train_size=800, val_size=16))
    assert abs(Counter(even.train_prompt(i).meta["subset"] for i in range(800))["chain_sum"] / 800 - 0.5) < 0.05


def test_dataset_options_pass_through():
    task = get_task(
        task_config(
            name="rg:chain_sum",
            options={"min_terms": 5, "max_terms": 5, "min_digits": 1, "max_digits": 1},
            train_size=10,
            val_size=4,
        )
    )
    assert all(task.train_prompt(i).meta["entry"]["metadata"]["num_terms"] == 5 for i in range(10))
    mix = get_task(
        task_config(
            name="rg:chain_sum,leg_counting",
            options={"chain_sum": {"min_terms": 4, "max_terms": 4}},
            train_size=40,
            val_size=4,
        )
    )
    sums = [p.meta["entry"] for p in (mix.train_prompt(i) for i in range(40)) if p.meta["subset"] == "chain_sum"]
    assert sums and all(e["metadata"]["num_terms"] == 4 for e in sums)


def test_tiny_model_trains_on_five_kinds(tmp_path):
    cfg = load_config(
        "scalerl",
        overrides=[
            "model.name=tiny-random",
            f"task.name=rg:{','.join(KINDS)}",
            "task.train_size=40",
            "task.val_size=8",
            "batch.prompts=4",
            "batch.generations=4",
            "rollout.max_new_tokens=24",
            "rollout.batch_slots=16",
            "rollout.length.think_min=8",
            "rollout.length.think_max=10",
            "rollout.length.answer_budget=8",
            "rollout.length.phrase=</think>",
            "filter.zero_variance=false",
            "reward.partial_credit=true",
            "eval.every=2",
            "eval.prompts=8",
            "task.answer_instruction=null",  # the character tokenizer: the sentence would push mazes over the context
            "eval.samples=1",
            "run.max_steps=2",
            "run.checkpoint_every=2",
            "pipeline.transport=thread",
            "run.threads=1",
        ],
    )
    comps = build_components(cfg, "cpu")
    train(cfg, tmp_path, comps=comps, progress=False)
    assert {comps.task.train_prompt(i).meta["subset"] for i in range(40)} == set(KINDS)
    rows = read_rows(tmp_path / "metrics.jsonl")
    steps = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert r["train/reward_errors"] == 0 and r["train/reward_slow"] == 0 and r["curriculum/pool_size"] == 40
        assert -1.0 <= r["train/reward_mean"] <= 1.0
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 2]


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["task.name=rg:chain_sun"], r"unknown reasoning-gym dataset 'chain_sun' \(closest: chain_sum"),
        (
            ["task.name=rg:chain_sum", "task.options={min_term: 2}"],
            r"'min_term' is not an option of reasoning-gym "
            r"dataset 'chain_sum' \(its options: .*min_terms",
        ),
        (["reward.threshold=0"], r"reward.threshold = 0: Input should be greater than 0"),
        (["reward.threshold=1.5"], r"reward.threshold = 1.5: Input should be less than or equal to 1"),
    ],
)
def test_bad_input_is_one_line_exit_2(overrides, match, tmp_path, capsys):
    args = [a for o in ["model.name=tiny-random", *overrides] for a in ("--set", o)]
    code = main(["train", "--no-progress", *args, "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    import re

    assert re.search(match, err), err
    with pytest.raises(ScaleRLError):
        get_task(task_config(name="rg:chain_sum", weights=[1, 2]))  # two weights for one dataset
