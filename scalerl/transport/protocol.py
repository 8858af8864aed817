"""`RolloutSource`: what the loop needs of a transport (thread, process, Ray): receive a scored group;
publish weights + version; retire prompts; pause, resume, close."""

from __future__ import annotations

from typing import Protocol

from scalerl.types import Group


class RolloutSource(Protocol):
    def ready(self) -> None:
        """Block until the generator can generate (its start-up is over)."""

    def get(self, timeout: float | None = None) -> Group:
        """The next scored group in draw order (blocks; raises the generator's error if it failed)."""

    def publish(self, state_dict: dict, version: int) -> None:
        """Hand new weights to the generator; it applies them in flight."""

    def retire(self, prompt_id: str) -> None:
        """The curriculum retired a prompt: never sample it again."""

    def sampler_state(self) -> dict:
        """Position of the prompt sampler (for checkpoints)."""

    def pause(self) -> None:
        """Start no new prompt until `resume()` (e.g. while the trainer evaluates)."""

    def resume(self) -> None: ...

    def close(self) -> None: ...
