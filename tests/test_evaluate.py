"""`scalerl.evaluate.evaluate`: mean@k overall and per subset."""

from scalerl.evaluate import evaluate
from scalerl.types import Completion, Prompt


class ScriptedGenerator:
    """Returns `n` completions per prompt whose text is the answer for the first `right[id]`."""

    def __init__(self, right: dict[str, int]):
        self.right = right

    def generate(self, prompts, n):
        out = []
        for p in prompts:
            for i in range(n):
                text = p.answer if i < self.right[p.id] else "wrong"
                out.append(Completion(id=f"{p.id}/{i}", prompt_id=p.id, prompt_tokens=[1], tokens=[1] * (i + 1),
                                      logprobs=[0.0] * (i + 1), versions=[0] * (i + 1), text=text,
                                      finish_reason="eos"))
        return out


def check(prompt, completion):
    completion.passed = completion.text == prompt.answer
    completion.reward = 1.0 if completion.passed else -1.0


def test_pass_rate_overall_and_per_subset():
    prompts = [Prompt("a", "q", "1", {"subset": "easy"}), Prompt("b", "q", "2", {"subset": "easy"}),
               Prompt("c", "q", "3", {"subset": "hard"}), Prompt("d", "q", "4")]     # d: no subset
    row = evaluate(ScriptedGenerator({"a": 4, "b": 3, "c": 1, "d": 2}), prompts, 4, check)
    assert row["val/pass_rate"] == (4 + 3 + 1 + 2) / 16
    assert row["val/pass_rate/easy"] == 7 / 8 and row["val/pass_rate/hard"] == 1 / 4
    assert not any(k.startswith("val/pass_rate/") for k in row if k[len("val/pass_rate/"):] not in ("easy", "hard"))
    assert row["val/completions"] == 16 and row["tokens/val_generated"] == 4 * (1 + 2 + 3 + 4)
    assert row["val/reward_mean"] == (10 - 6) / 16


def test_final_fit_window_keeps_five_evaluations():
    import numpy as np

    from scalerl.scaling import window_start  # the window rule of train and of the study report

    warns = []
    x = np.array([0.0, 1, 2, 3, 4, 5, 6])
    assert window_start(x, 0.2, warns) == 0.2 * 6 and warns == []          # 1.2: points 2..6 remain
    assert window_start(x, 0.5, warns) == 2.0 and "instead of 0.5 of the compute" in warns[0]  # 3 would leave 4
    assert window_start(np.array([0.0, 1, 2, 3]), 0.5, []) == 1.5             # too few anyway: left to the fit's error
