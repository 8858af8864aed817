"""scalerl.integrations.trl.ForecastCallback in a real TRL GRPOTrainer run on the CPU (a tiny random
Llama, the reward of examples/trl_forecast.py): the forecast reaches TensorBoard through the
trainer's own loggers, equals `scalerl fit` on the same logs, and the stop rule ends training.
The callback module imports without TRL."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import trl_forecast  # noqa: E402  (examples/trl_forecast.py: the reward, the TensorBoard reader, scalerl fit)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _trainer(tmp_path, steps: int, **cb_kwargs):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from scalerl.integrations.trl import ForecastCallback
    from scalerl.models.tiny import build_random, build_tokenizer

    tokenizer = build_tokenizer()
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(tmp_path / "tb")
    cfg = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        num_generations=4,
        num_generations_eval=4,
        max_completion_length=8,
        learning_rate=3e-3,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="no",
        report_to="tensorboard",
        seed=0,
        use_cpu=True,
        dataloader_num_workers=0,
        temperature=1.0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=build_random(tokenizer, seed=0),
        reward_funcs=trl_forecast.share_of_a,
        args=cfg,
        train_dataset=Dataset.from_dict({"prompt": [f"say a{i}:" for i in range(32)]}),
        eval_dataset=Dataset.from_dict({"prompt": [f"write a{i}." for i in range(4)]}),
        processing_class=tokenizer,
    )
    return trainer, ForecastCallback.attach(trainer, **cb_kwargs)


def test_forecast_reaches_tensorboard_and_the_stop_rule_ends_training(tmp_path):
    # a budget already spent (1 step): the gain left is 0, so the rule fires at the first refit,
    # the evaluation at step 10 (the sixth, counting step 0: five past compute 0)
    trainer, cb = _trainer(tmp_path, steps=20, budget=1.0, stop=True)
    trainer.evaluate()
    trainer.train()
    assert trainer.state.global_step == 10 and cb.stopped_at == 10.0
    assert cb.x == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    tb = trl_forecast.tensorboard_forecasts(tmp_path / "tb")
    for key in ("A", "A_lo", "A_hi", "B", "C_mid", "identified", "gain_2x", "gain_10x_hi", "gain_to_budget", "stop"):
        ((step, value),) = tb[f"train/forecast/{key}"]  # one refit, logged once, at step 10
        assert step == 10 and value == pytest.approx(cb.last[f"forecast/{key}"], rel=1e-6), key
    assert (
        cb.last["forecast/stop"] == 1.0
        and cb.last["forecast/A_lo"] <= cb.last["forecast/A"] <= cb.last["forecast/A_hi"]
    )
    # the eval rewards the callback fitted are the ones TRL logged (train() starts a new history, so
    # the evaluation before training is in TensorBoard only), and scalerl fit on the same logs agrees
    history = [r["eval_reward"] for r in trainer.state.log_history if "eval_reward" in r]
    np.testing.assert_allclose(cb.y[1:], history)
    assert trl_forecast.scalerl_fit(tmp_path / "tb") == pytest.approx(cb.last["forecast/A"], abs=1e-9)


def test_a_missing_metric_is_one_clear_error(tmp_path):
    from scalerl.errors import ScaleRLError

    trainer, _ = _trainer(tmp_path, steps=2, metric="eval_pass_rate")
    with pytest.raises(ScaleRLError, match="no 'eval_pass_rate' among the evaluation metrics .*eval_reward"):
        trainer.evaluate()


def test_the_callback_imports_without_trl():
    code = (
        "import sys; sys.modules['trl'] = None; import scalerl.integrations.trl as t; "
        "print(t.ForecastCallback.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0 and out.stdout.strip() == "ForecastCallback", out.stderr
