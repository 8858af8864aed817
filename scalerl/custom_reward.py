"""A user's reward function with TRL's signature, beside or instead of the task's checker.

`reward.function` names it: `<module>:<name>` (imported) or `<path/to/file.py>:<name>` (loaded
from the file). It is called as TRL calls its reward functions,
`fn(prompts=[prompt], completions=[completion text], **columns) -> [float | None]`, one
completion per call: `prompts` holds the dataset's prompt (text, or the list of
`{role, content}` messages), `columns` every other column of the row as one-element lists (the
answer under its column name; for built-in and reasoning-gym tasks, `answer`). None means "not
applicable": the function's term is left out. The function runs in the thread that scores (the
generator's), never in the checker's worker process; a `CustomReward` pickles as its spec and
loads the function again where it is unpickled (a generator process, a Ray actor).

Departures from TRL:
1. TRL calls a reward function once per batch; here once per completion (scores are computed as
   completions finish, in the generator).
"""

from __future__ import annotations

import math

from scalerl.errors import located, retold
from scalerl.types import Prompt
from scalerl.user_code import load_function, resolve_spec


class CustomReward:
    """`(prompt, completion text) -> float | None`: the user's function on one completion; raises
    `RuntimeError` naming the prompt (and its row) when it raises or returns something else."""

    def __init__(self, spec: str):
        self._fn = load_function(spec)
        self.spec = resolve_spec(spec)
        self.name = spec

    def __call__(self, prompt: Prompt, text: str) -> float | None:
        columns = prompt.meta["columns"] if "columns" in prompt.meta else {"answer": prompt.answer}
        question = prompt.meta["prompt"] if "prompt" in prompt.meta else prompt.text
        where = f"row {prompt.meta['row']} ({prompt.id})" if "row" in prompt.meta else prompt.id
        try:
            values = self._fn(prompts=[question], completions=[text], **{k: [v] for k, v in columns.items()})
        except Exception as e:  # the user's code: reported as this completion's error, counted per step
            raise retold(f"reward.function {self.name} raised on {where}: {located(e)}", e) from None
        return _one_value(values, self.name, where)

    def __getstate__(self):
        return {"spec": self.spec, "name": self.name}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._fn = load_function(self.spec)


def _one_value(values, name: str, where: str) -> float | None:
    if not isinstance(values, (list, tuple)) or len(values) != 1:
        raise RuntimeError(
            f"reward.function {name} on {where}: expected a list of one float or None, got {str(values)[:80]}"
        )
    value = values[0]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RuntimeError(f"reward.function {name} on {where}: expected a finite float or None, got {value!r}")
    return float(value)
