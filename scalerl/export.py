"""`scalerl export`: a run's trained policy as a plain Hugging Face model folder.

A scalerl checkpoint (`checkpoints/step_N/model.safetensors`) holds the trainer's weights only;
the model they belong to is the `model.name` of the run's config.yaml. `export_run` loads the
base model, puts the checkpoint's weights over it (`scalerl.models.load_model`), and writes

    config.json, generation_config.json, model.safetensors   (`save_pretrained`)
    tokenizer files                                         (`save_pretrained`)
    README.md                                               a model card: recipe, key settings, fitted curve

so that `AutoModelForCausalLM.from_pretrained(OUT_DIR)` and `AutoTokenizer.from_pretrained(OUT_DIR)`
load it as they are.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalerl.config import task_name
from scalerl.errors import ScaleRLError
from scalerl.run.checkpoint import DamagedCheckpoint, read_state, verify_checksums
from scalerl.run.rundir import CONFIG_FILE, checkpoints, read_run_config

CARD = "README.md"


def pick_checkpoint(run_dir: Path, step: int | None = None) -> Path:
    """Checkpoint `step` of `run_dir`, or its newest intact one (checksums verified; damaged ones skipped)."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise ScaleRLError(f"{run_dir}: not a scalerl run directory (no {CONFIG_FILE} there)")
    found = [p for p in checkpoints(run_dir) if (p / "state.json").is_file()]
    if not found:
        raise ScaleRLError(
            f"{run_dir}: no checkpoint (nothing under {run_dir / 'checkpoints'} has a state.json; "
            "run.checkpoint_every sets how often a run saves one)"
        )
    if step is not None:
        named = {read_step(p): p for p in found}
        if step not in named:
            raise ScaleRLError(
                f"{run_dir}: no checkpoint at step {step} (its checkpoints: steps "
                f"{', '.join(str(s) for s in sorted(named))})"
            )
        verify_checksums(named[step])
        return named[step]
    problems = []
    for path in reversed(found):
        try:
            verify_checksums(path)
            read_state(path)
        except DamagedCheckpoint as exc:
            problems.append(str(exc))
            continue
        return path
    raise ScaleRLError(f"{run_dir}: every checkpoint is damaged ({'; '.join(problems)})")


def read_step(path: Path) -> int:
    """The step of a `step_N` checkpoint folder (its name)."""
    return int(path.name.removeprefix("step_"))


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ScaleRLError(f"{out_dir}: exists and is a file; expected a new or empty folder")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise ScaleRLError(f"{out_dir}: exists and is not empty; choose a new folder (an export never overwrites)")


def export_run(run_dir: str | Path, out_dir: str | Path, step: int | None = None) -> Path:
    """Write checkpoint `step` (default: the newest intact one) of `run_dir` to `out_dir` as a
    Hugging Face model folder with a model card; returns the checkpoint exported."""
    from scalerl.models import load_model

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    ckpt = pick_checkpoint(run_dir, step)
    _check_out_dir(out_dir)
    cfg = read_run_config(run_dir)
    model, tokenizer = load_model(str(ckpt), dtype=cfg["model"]["dtype"], device="cpu")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScaleRLError(f"cannot create {out_dir}: {exc.strerror}") from None
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / CARD).write_text(model_card(cfg, read_fit(run_dir), ckpt, run_dir), encoding="utf-8")
    return ckpt


def read_fit(run_dir: Path) -> dict | None:
    """The run's `fit.json`, or None when there is none (or it cannot be read)."""
    file = Path(run_dir) / "fit.json"
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"fitted": False, "reason": f"{file} is not valid JSON"}
    return data if isinstance(data, dict) else {"fitted": False, "reason": f"{file} is not a JSON object"}


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def fit_lines(fit: dict | None) -> list[str]:
    """The model card's fitted-curve section."""
    if fit is None:
        return [
            "No fit: the run has no fit.json (it wrote none, e.g. it was stopped before its end or had too "
            "few evaluations; `scalerl fit RUN_DIR` fits one)."
        ]
    if "A" not in fit:
        return [f"No fit: {fit.get('reason', 'fit.json holds no fitted curve')}."]
    lo, hi = (fit.get("ci") or {}).get("A") or (None, None)
    final = fit.get("final") or {}
    return [
        f"Sigmoid fitted to the validation pass rate against compute ({fit.get('x', 'compute')}):",
        "",
        f"- A (asymptotic pass rate): {_num(fit['A'])} (90% interval [{_num(lo)}, {_num(hi)}])",
        f"- B (scaling exponent): {_num(fit.get('B'))}",
        f"- C_mid (compute at half the gain): {_num(fit.get('C_mid'))}",
        f"- pass rate at the start: {_num(final.get('start_pass_rate'))}, at the end (mean of the last three "
        f"evaluations): {_num(final.get('end_pass_rate'))}",
    ]


def model_card(cfg: dict, fit: dict | None, ckpt: Path, run_dir: Path) -> str:
    """README.md of an exported model: where it came from, the recipe and key settings, the fitted curve."""
    m, t, loss, b, o, ro = (cfg["model"], cfg["task"], cfg["loss"], cfg["batch"], cfg["optim"], cfg["rollout"])
    settings = [
        ("recipe", cfg.get("recipe")),
        ("base model", m["name"]),
        ("step", read_step(ckpt)),
        ("task", task_name(t) + (f" ({t['path']})" if t.get("path") else "")),
        ("loss", ", ".join(f"{k}={v}" for k, v in loss.items())),
        ("batch", f"{b['prompts']} prompts x {b['generations']} generations"),
        ("optimizer", f"AdamW lr={o['lr']}, warmup {o['warmup_steps']} steps, grad clip {o['grad_clip']}"),
        ("advantage", ", ".join(f"{k}={v}" for k, v in cfg["advantage"].items())),
        (
            "rollout",
            f"max_new_tokens={ro['max_new_tokens']}, temperature={ro['temperature']}, "
            f"length control {ro['length']['type']}",
        ),
        ("pipeline", f"{cfg['pipeline']['mode']}, k={cfg['pipeline']['k']}"),
        ("precision", f"dtype {m['dtype']}, compute {m['compute_dtype']}, fp32 head {m['fp32_head']}"),
    ]
    rows = "\n".join(f"- {k}: {v}" for k, v in settings)
    return (
        f"---\nlibrary_name: transformers\ntags: [scalerl, reinforcement-learning]\n---\n\n"
        f"# {run_dir.name} (step {read_step(ckpt)})\n\n"
        f"Trained with scalerl (RL post-training after ScaleRL, arXiv 2510.13786); exported by "
        f"`scalerl export` from `{ckpt}`.\n\n## Recipe and key settings\n\n{rows}\n\n"
        f"The run's full config is its `config.yaml`.\n\n## Fitted curve\n\n" + "\n".join(fit_lines(fit)) + "\n"
    )
