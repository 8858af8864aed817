"""`scalerl generate` end to end, with stand-ins for the models and tasks areas."""

from __future__ import annotations

import sys
import types

from rollout_helpers import char_tokenizer, tiny_llama
from scalerl.cli import main
from scalerl.types import Prompt, Score


class FakeTask:
    name = "echo"
    answer_marker = "</think>"

    def val_prompts(self, n):
        return [Prompt(id=f"v{i}", text=f"{i}+{i}=", answer=str(2 * i)) for i in range(n)]

    def train_prompt(self, i):
        return Prompt(id=f"t{i}", text=f"{i}*{i}=", answer=str(i * i))


class FakeReward:
    """Passes completions whose first token is even: a rule the test can recompute."""

    def __init__(self, task, cfg):
        self.cfg = cfg

    def __call__(self, prompt, c):
        passed = c.tokens[0] % 2 == 0
        return Score(self.cfg.pass_value if passed else self.cfg.fail_value, passed)

    def close(self):
        pass


def test_generate_prints_samples_rewards_and_summary(monkeypatch, capsys):
    tok = char_tokenizer()
    seen = {}

    def load_model(name, dtype="fp32", device="cpu"):
        seen["model"] = (name, dtype, device)
        return tiny_llama(len(tok), seed=0), tok

    def get_task(cfg, tokenizer):
        seen["task"] = cfg.name
        return FakeTask()

    import scalerl.models.facts as facts
    import scalerl.rollout.engine  # noqa: F401 (the real engine, imported before scalerl.models is replaced:
    # alone, this test otherwise failed on the engine's own import of scalerl.models)

    monkeypatch.setattr(facts, "model_facts", lambda name: None)  # "m" is no model: no derived profile
    monkeypatch.setitem(sys.modules, "scalerl.models", types.SimpleNamespace(load_model=load_model))
    monkeypatch.setitem(sys.modules, "scalerl.tasks", types.SimpleNamespace(get_task=get_task))
    from scalerl.rewards import answer_section

    monkeypatch.setitem(
        sys.modules, "scalerl.rewards", types.SimpleNamespace(RewardFn=FakeReward, answer_section=answer_section)
    )
    rc = main(
        [
            "generate",
            "--model",
            "m",
            "--task",
            "arith-2x3",
            "--n",
            "3",
            "--prompts",
            "2",
            "--greedy",
            "--set",
            "rollout.max_new_tokens=6",
            "--set",
            "rollout.length.type=none",
            "--set",
            "reward.fail_value=0",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and seen == {"model": ("m", "fp32", "auto"), "task": "arith-2x3"}
    assert out.count("=== v") == 2 and out.count("--- ") == 6
    # greedy: the 3 samples of a prompt are identical, so each prompt scores 3 passes or 3 fails
    marks = [line.split()[1] for line in out.splitlines() if line.startswith("--- ")]
    assert marks[:3] == [marks[0]] * 3 and marks[3:] == [marks[3]] * 3
    rewards = {"PASS": "+1", "fail": "+0"}
    assert all(line.split()[3] == rewards[line.split()[1]] for line in out.splitlines() if line.startswith("--- "))
    passed = (marks.count("PASS")) / 6
    assert f"pass rate {passed:.3f} over 6 completions" in out


def test_generate_rejects_bad_counts(capsys):
    assert main(["generate", "--n", "0"]) == 2
    assert "--n (0)" in capsys.readouterr().err


def test_train_refuses_an_interruption_budget_that_cuts_the_answer(tmp_path):
    """Through the real CLI process: one line naming the four numbers, exit status 2, before any
    generator process starts or any step runs. The tiny tokenizer writes "Time is up. </think>"
    in 12 + 1 tokens (one a character, one for `</think>`): 140 + 13 + 32 = 185 > 160."""
    import subprocess

    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalerl",
            "train",
            "--no-progress",
            "--run-dir",
            str(run),
            "--set",
            "model.name=tiny-random",
            "--set",
            "rollout.length.think_max=140",
            "--set",
            "rollout.length.phrase=Time is up. </think>",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalerl: error: rollout.length:")
    assert (
        "think_max (140) + interruption phrase (13 tokens with this tokenizer) + answer_budget (32) = 185 > "
        "rollout.max_new_tokens (160)"
    ) in lines[0]
    metrics = run / "metrics.jsonl"
    assert not metrics.exists() or metrics.read_text() == ""  # refused before the step-0 evaluation


def test_generate_says_no_answer_apart_from_wrong_answer():
    from scalerl.commands.generate import format_samples, format_summary
    from scalerl.types import Completion

    def completion(text):
        return Completion(
            id="c",
            prompt_id="p",
            prompt_tokens=[],
            tokens=[1, 2],
            logprobs=[],
            versions=[],
            text=text,
            finish_reason="eos",
        )

    texts = ["<think>1+1</think>2", "<think>1+1</think>3", "<think>1+1 is"]
    answered = [True, True, False]  # the last has no '</think>': no answer section
    scores = [Score(1.0, True), Score(-1.0, False), Score(-1.0, False)]
    out = format_samples([Prompt("p", "1+1=", "2")], [completion(t) for t in texts], scores, 3, answered)
    marks = [line.split("  ")[0] for line in out.splitlines() if line.startswith("--- ")]
    assert marks == ["--- PASS reward +1", "--- fail (wrong answer) reward -1", "--- fail (no answer found) reward -1"]
    summary = format_summary([completion(t) for t in texts], scores, 1.0, "m", "t", answered)
    assert "pass rate 0.333 over 3 completions" in summary and "no answer found in 33.3%" in summary
