"""`scalerl.evaluate.evaluate`: mean@k overall and per subset."""

import pytest

from doubles import pass_fail
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
                out.append(
                    Completion(
                        id=f"{p.id}/{i}",
                        prompt_id=p.id,
                        prompt_tokens=[1],
                        tokens=[1] * (i + 1),
                        logprobs=[0.0] * (i + 1),
                        versions=[0] * (i + 1),
                        text=text,
                        finish_reason="eos",
                    )
                )
        return out


def check(prompt, completion):
    return pass_fail(completion.text == prompt.answer)


def test_pass_rate_overall_and_per_subset():
    prompts = [
        Prompt("a", "q", "1", {"subset": "easy"}),
        Prompt("b", "q", "2", {"subset": "easy"}),
        Prompt("c", "q", "3", {"subset": "hard"}),
        Prompt("d", "q", "4"),
    ]  # d: no subset
    row = evaluate(ScriptedGenerator({"a": 4, "b": 3, "c": 1, "d": 2}), prompts, 4, check)
    assert row["val/pass_rate"] == (4 + 3 + 1 + 2) / 16
    assert row["val/pass_rate/easy"] == 7 / 8 and row["val/pass_rate/hard"] == 1 / 4
    assert not any(k.startswith("val/pass_rate/") for k in row if k[len("val/pass_rate/") :] not in ("easy", "hard"))
    assert row["val/completions"] == 16 and row["tokens/val_generated"] == 4 * (1 + 2 + 3 + 4)
    assert row["val/reward_mean"] == (10 - 6) / 16


def test_final_fit_window_keeps_five_evaluations():
    import numpy as np

    from scalerl.scaling import window_start  # the window rule of train and of the study report

    warns = []
    x = np.array([0.0, 1, 2, 3, 4, 5, 6])
    assert window_start(x, 0.2, warns) == 0.2 * 6 and warns == []  # 1.2: points 2..6 remain
    assert window_start(x, 0.5, warns) == 2.0 and "instead of 0.5 of the compute" in warns[0]  # 3 would leave 4
    assert window_start(np.array([0.0, 1, 2, 3]), 0.5, []) == 1.5  # too few anyway: left to the fit's error


class RandomGenerator:
    """Each completion of prompt i passes with probability p[i] (a seeded coin)."""

    def __init__(self, p: dict[str, float], seed: int):
        import random

        self.p, self.rng = p, random.Random(seed)

    def generate(self, prompts, n):
        return [
            Completion(
                id=f"{q.id}/{i}",
                prompt_id=q.id,
                prompt_tokens=[1],
                tokens=[1],
                logprobs=[0.0],
                versions=[0],
                text=q.answer if self.rng.random() < self.p[q.id] else "wrong",
                finish_reason="eos",
            )
            for q in prompts
            for i in range(n)
        ]


def test_sampling_se_matches_the_spread_of_repeated_evaluations():
    import numpy as np

    # 60 prompts: a third always right, a third never, a third at 0.2..0.8: the prompt-fixed
    # sampling sd is sqrt(sum p(1-p) / k) / n, well under the binomial sqrt(pbar (1 - pbar) / (n k))
    ps = [1.0] * 20 + [0.0] * 20 + list(np.linspace(0.2, 0.8, 20))
    p = {str(i): v for i, v in enumerate(ps)}
    prompts = [Prompt(str(i), "q", "1") for i in range(len(ps))]
    k, n = 4, len(ps)
    truth = np.sqrt(sum(v * (1 - v) for v in ps) / k) / n
    rows = [evaluate(RandomGenerator(p, seed), prompts, k, check) for seed in range(400)]
    rates = np.array([r["val/pass_rate"] for r in rows])
    ses = np.array([r["val/pass_rate_se"] for r in rows])
    assert abs(rates.std(ddof=1) / truth - 1) < 0.12  # 400 repeats: the sd's own error is ~3.5%
    assert abs(ses.mean() / truth - 1) < 0.05  # the per-evaluation estimate agrees on average
    assert truth < 0.75 * np.sqrt(0.5 * 0.5 / (n * k))  # and is smaller than the binomial figure


class SideGenerator(ScriptedGenerator):
    """A ScriptedGenerator that records what it was asked, on which thread, and its reseeds; if
    `wait` is given it returns only once that event is set (the other side has started)."""

    def __init__(self, right, started, wait=None):
        super().__init__(right)
        self.asked, self.threads, self.reseeds, self.version = [], [], 0, 5
        self.started, self.wait = started, wait

    def reseed(self):
        self.reseeds += 1

    def generate(self, prompts, n):
        import threading

        self.asked.append([p.id for p in prompts])
        self.threads.append(threading.current_thread().name)
        self.started.set()
        if self.wait is not None:
            assert self.wait.wait(timeout=30), "the other side never started: the two sides did not run at once"
        return super().generate(prompts, n)


def test_a_split_evaluation_deals_the_prompts_in_turn_runs_both_sides_at_once_and_keeps_the_order():
    import threading

    from scalerl.evaluate import SplitEvaluator

    prompts = [Prompt(c, "q", str(i), {"subset": "easy" if i % 3 else "hard"}) for i, c in enumerate("abcdefg")]
    right = {p.id: i % 3 for i, p in enumerate(prompts)}
    remote_started, local_started = threading.Event(), threading.Event()
    remote = SideGenerator(right, remote_started, wait=local_started)  # returns only once the local side started
    local = SideGenerator(right, local_started, wait=remote_started)
    split = SplitEvaluator(remote, local, 0.5)
    split.reseed()
    out = split.generate(prompts, 3)
    assert remote.asked == [["a", "c", "e", "g"]] and local.asked == [["b", "d", "f"]]
    assert local.threads == [threading.current_thread().name] and remote.threads[0].startswith("scalerl-eval-remote")
    assert remote.reseeds == local.reseeds == 1 and split.version == 5
    assert [c.id for c in out] == [f"{p}/{i}" for p in "abcdefg" for i in range(3)]
    # the row is the one a single generator's completions give
    assert evaluate(split, prompts, 3, check) == evaluate(ScriptedGenerator(right), prompts, 3, check)


def test_a_split_evaluation_gives_each_side_its_share():
    from scalerl.evaluate import SplitEvaluator

    split = SplitEvaluator(None, None, 1 / 3)
    dealt = split.deal(9)
    assert dealt == [False, False, True] * 3
    assert sum(SplitEvaluator(None, None, 0.5).deal(512)) == 256
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match=f"local_share = {bad}: expected a share between 0 and 1"):
            SplitEvaluator(None, None, bad)
