"""Every shell command in README.md and docs/ runs, or says why not (docs/contributing-docs.md).

A fenced block tagged `bash` (or `sh`, `shell`) runs as a bash script with `set -euo pipefail`; a `console`
block runs each `$ ` line, and where the block shows `scalerl: error: ...` after a command, the command must
fail (exit 2) with that line. The first lines of a block may carry one of two visible markers:

    # not run: <reason>            the block is not run; the reason is required
    # tested as: <command>         the test runs this fast variant instead (one line per command; in a console
                                   block, one per `$ ` command, expected to fail as that command is shown to);
                                   `$DOCS_TINY` stands for the settings of a training run of seconds

Each page's blocks run in order in one scratch directory (a later block may use a file an earlier one
wrote), with the repository's top-level entries linked in, `scalerl` and `python` on PATH as this
interpreter, and no network. Pages under docs/history/ are the record of what was run and when: they are
not run, and each must say so at its top. A block that looks like commands but carries no shell tag fails.
New pages are picked up by the glob below.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHELL = {"bash", "sh", "shell"}
HISTORY_NOTE = "not run by the docs test"
BLOCK_TIMEOUT_S = 300
# `$DOCS_TINY` in a `# tested as:` line: the settings of a training run of seconds (a random tiny model, 2 x 4
# completions of at most 12 tokens, no zero-variance filter: a random model passes nothing).
DOCS_TINY = (
    "--no-progress --set model.name=tiny-random --set filter.zero_variance=false --set batch.prompts=2 "
    "--set batch.generations=4 --set rollout.max_new_tokens=12 --set rollout.length.think_min=4 "
    "--set rollout.length.think_max=6 --set rollout.length.answer_budget=4 "
    "--set rollout.length.phrase=</think> --set eval.prompts=4 --set eval.samples=2 --set run.threads=1"
)
COMMAND_WORDS = re.compile(r"^\s*(\$ |scalerl |make |python3? |\.venv/bin/|bash |pip |ray |PY=|PYTHONPATH=|cd |git )")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    lines: list[str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page (``` or ~~~ fences at any indentation)."""
    found, current, fence = [], None, ""
    for number, text in enumerate(page.read_text().splitlines(), start=1):
        stripped = text.strip()
        if current is None:
            match = re.match(r"^(```+|~~~+)\s*([\w+-]*)", stripped)
            if match:
                fence, current = match.group(1), Block(page, number, match.group(2).lower(), [])
        elif stripped.startswith(fence) and stripped.strip(fence[0]) == "":
            found.append(current)
            current = None
        else:
            current.lines.append(text)
    assert current is None, f"{page.relative_to(ROOT)}:{current.line}: a code fence is never closed"
    return found


def indented_commands(page: Path) -> list[tuple[int, str]]:
    """Command lines in 4-space indented code blocks (outside fences): they must be fenced to be checked."""
    found, in_fence, previous = [], False, ""
    for number, text in enumerate(page.read_text().splitlines(), start=1):
        if re.match(r"^\s*(```|~~~)", text):
            in_fence = not in_fence
        elif not in_fence and text.startswith("    ") and COMMAND_WORDS.match(text) and previous.strip() == "":
            found.append((number, text.strip()))
        previous = text if not text.startswith("    ") or previous.strip() == "" else previous
    return found


def markers(block: Block) -> tuple[str | None, list[str]]:
    """(the reason it is not run, or None; the fast-variant commands to run instead, if any)."""
    reason, variants = None, []
    for text in block.lines:
        stripped = text.strip()
        if stripped.startswith("# not run:"):
            reason = stripped.removeprefix("# not run:").strip()
            assert reason, f"{block.where}: '# not run:' needs a reason"
        elif stripped.startswith("# tested as:"):
            variants.append(stripped.removeprefix("# tested as:").strip())
        elif stripped and not stripped.startswith("#"):
            break
    return reason, variants


def console_commands(block: Block) -> list[tuple[str, str | None]]:
    """(command, expected error line or None) for each `$ ` line of a console block."""
    out: list[tuple[str, str | None]] = []
    command: list[str] = []
    for text in block.lines:
        if text.startswith("$ ") or (command and command[-1].endswith("\\")):
            command.append(text.removeprefix("$ ").rstrip())
            if not command[-1].endswith("\\"):
                out.append((" ".join(c.rstrip("\\").strip() for c in command), None))
                command = []
        elif out and out[-1][1] is None and text.startswith("scalerl: error:"):
            out[-1] = (out[-1][0], text.strip())
    return out


def scratch_env(scratch: Path) -> dict[str, str]:
    """A scratch directory with the repository's entries linked in and `scalerl`/`python` on PATH."""
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "runs", ".venv") and not (scratch / entry.name).exists():
            (scratch / entry.name).symlink_to(entry)
    bin_dir = scratch / ".venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, target in (("python", ""), ("python3", ""), ("scalerl", "-m scalerl")):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {target} "$@"\n')
        shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "DOCS_TINY": DOCS_TINY,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MPLBACKEND": "Agg",
    }
    return env


def run_bash(script: str, scratch: Path, env: dict[str, str], where: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + script],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: still running after {BLOCK_TIMEOUT_S} s: {script[:200]!r}")


def check_block(block: Block, scratch: Path, env: dict[str, str]) -> None:
    reason, variants = markers(block)
    if reason is not None:
        return
    if block.lang == "console":
        shown = console_commands(block)
        runs = list(zip(variants, [error for _, error in shown])) if variants else shown
        assert not variants or len(variants) == len(shown), f"{block.where}: one `# tested as:` line per `$ ` command"
    else:
        runs = [("\n".join(variants) if variants else "\n".join(block.lines), None)]
    assert runs, f"{block.where}: a console block without a `$ ` command"
    for script, error in runs:
        done = run_bash(script, scratch, env, block.where)
        if error is None:
            assert done.returncode == 0, (
                f"{block.where}: exit {done.returncode}: {script}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            )
        else:
            assert done.returncode == 2 and error in done.stderr, (
                f"{block.where}: expected exit 2 and {error!r}; got exit {done.returncode}: {done.stderr[-2000:]}"
            )


def is_history(page: Path) -> bool:
    return (ROOT / "docs" / "history") in page.parents


RUN_PAGES = [p for p in doc_pages() if not is_history(p)]


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(ROOT)) for p in RUN_PAGES])
def test_documented_commands_run(page, tmp_path):
    env = scratch_env(tmp_path)
    for block in blocks(page):
        if block.lang in SHELL or block.lang == "console":
            check_block(block, tmp_path, env)


@pytest.mark.parametrize("page", doc_pages(), ids=[str(p.relative_to(ROOT)) for p in doc_pages()])
def test_commands_are_tagged_and_marked(page):
    """A block of commands without a shell tag would escape the test above; a history page says it is not run."""
    for block in blocks(page):
        if block.lang not in SHELL | {"console"}:
            commands = [t for t in block.lines if COMMAND_WORDS.match(t)]
            assert not commands, (
                f"{block.where}: commands in a block tagged {block.lang or 'nothing'!r}: "
                f"{commands[0].strip()!r}; tag it bash (or console with `$ ` lines)"
            )
        else:
            markers(block)
    if not is_history(page):
        loose = indented_commands(page)
        assert not loose, (
            f"{page.relative_to(ROOT)}:{loose[0][0]}: a command in an indented block: "
            f"{loose[0][1]!r}; fence it as bash so the docs test sees it"
        )
    if is_history(page):
        assert HISTORY_NOTE in page.read_text()[:1500], (
            f"{page.relative_to(ROOT)}: a history page says at its top that its commands are {HISTORY_NOTE}"
        )


def test_the_checker_catches_a_broken_command(tmp_path):
    """The harness itself: a block whose command fails, and a console block whose error line is wrong, fail."""
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nscalerl fit no-such-dir\n```\n\n```console\n$ scalerl recipes show nope\n"
        "scalerl: error: not this line\n```\n\n```bash\n# not run: needs a GPU\nexit 3\n```\n"
    )
    found = blocks(page)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = scratch_env(scratch)
    for block in found:
        block.page = ROOT / "README.md"  # `where` names a path under the repository
    for block in found[:2]:
        with pytest.raises(AssertionError, match="README.md"):
            check_block(block, scratch, env)
    check_block(found[2], scratch, env)  # not run: passes without running `exit 3`
    assert console_commands(found[1]) == [("scalerl recipes show nope", "scalerl: error: not this line")]


def test_readme_links_and_images_resolve():
    """The README is not part of the MkDocs site, whose strict build checks the links of docs/: check its own."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets
    for target in targets:
        if target.startswith(("http://", "https://", "#")):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README.md links to {target}: {path} does not exist"
