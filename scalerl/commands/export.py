"""`scalerl export`: a run's checkpoint as a Hugging Face model folder (weights, config, tokenizer, model card)."""

from __future__ import annotations

import argparse

from scalerl.commands import require_train

HELP = "write a run's trained policy as a Hugging Face model folder that transformers loads as it is"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a scalerl run directory")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write (new or empty)")
    p.add_argument("--step", type=int, metavar="N", help="the checkpoint at step N (default: the newest intact one)")


def run(args: argparse.Namespace) -> int:
    require_train("export")
    from scalerl.export import export_run

    ckpt = export_run(args.run_dir, args.out_dir, args.step)
    print(f"exported {ckpt} to {args.out_dir} (load it with AutoModelForCausalLM.from_pretrained({args.out_dir!r}))")
    return 0
