"""`RolloutSource`: the one seam between the loop and generation (thread, process, Ray, PPO-off-policy
rounds): the next step's scored groups as `MiniBatch`es; the trainer's one message back
(`TrainerUpdate`: the new weights and version, the prompts the curriculum retired); pause, resume,
close. `GeneratorBuild`: the one way every transport builds its generator stage.

    GeneratorBuild(fn, args)(seed=..., [model, tokenizer, task, reward, temperature, weights]) -> Stage
        in this process (a thread; PPO-off-policy; the evaluation): the loop passes the model to
            decode with and the run's tokenizer, task and plain reward; `fn` builds the generator
        in a generator process or a Ray actor: nothing is passed; `fn` loads its own model, task
            and reward from `args` (so `fn` is a module-level function and `args` plain values);
            a generator process passes `weights`, the published buffer its model must decode from
            (scalerl.transport.weights; a fake generator may ignore them)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Protocol, runtime_checkable

from scalerl.types import Group


class Stage(NamedTuple):
    """A generator stage: what a transport runs (see `GeneratorBuild`)."""

    generator: Any  # a `scalerl.rollout.Generator` (stream, generate, update_weights, reseed)
    task: Any  # whose training prompts the sampler draws
    reward: Callable  # the training reward: (prompt, completion) -> Score (a length penalty included)
    sampler_seed: int  # the curriculum sampler's seed (`run.seed`)


@dataclass(frozen=True)
class GeneratorBuild:
    """`fn(*args, seed=..., model=None, tokenizer=None, task=None, reward=None, temperature=None,
    weights=None) -> Stage`: whatever is passed is used as it is, whatever is not is built from
    `args` (the run's config for `scalerl.assembly.generator.build_generator`). `temperature` None:
    the rollout's. `weights`: name -> tensor the model decodes from in place of its own."""

    fn: Callable[..., Stage]
    args: tuple = ()

    def __call__(self, seed: int, **given: Any) -> Stage:
        return self.fn(*self.args, seed=seed, **given)


@dataclass(frozen=True)
class TrainerUpdate:
    """What the trainer tells the generator after an optimizer step, as one message: the weights of
    policy `version` (a name -> tensor mapping the receiver copies; PipelineRL applies them in
    flight at the next decode step) and the prompts the curriculum retired since the previous
    message (never sampled again), and the PipelineRL staleness bound for the draws that start on
    this version (None: the window's own, `pipeline.k`; scalerl.rl.staleness)."""

    version: int
    weights: Mapping[str, Any]
    retired: tuple[str, ...] = ()
    bound: int | None = None


@dataclass(frozen=True)
class MiniBatch:
    """The groups drawn for one optimizer step, as the source delivered them (scored; the loop's
    filter stage picks the ones it trains on: `scalerl.batching.filter_groups`). Nothing changes it once made."""

    groups: list[Group]  # every group drawn for this step, in draw order (stale ones excluded)
    gen_seconds: float = 0.0  # generation wall-clock attributed to it (PPO mode)
    wait_seconds: float = 0.0  # trainer waited this long for data
    stale_dropped: int = 0
    tokens_generated: int = 0  # every token generated for it: trained, filtered out or dropped
    metrics: dict[str, float] = field(default_factory=dict)  # the batch rule's (batch/*), the transport's


class Filler(Protocol):
    """One step's batch rule, as a source fills it (`scalerl.batching.BatchFiller`)."""

    @property
    def full(self) -> bool: ...

    def add(self, group: Group) -> bool: ...

    def metrics(self) -> dict[str, float]: ...


@runtime_checkable
class RolloutSource(Protocol):
    """The one seam between the loop and generation: the source of scored groups that
    `scalerl.assembly.modes.make_mode` returns. Its policy (`scalerl.transport.policy`) says how many
    batches a step gets and when the weights reach the generator: PipelineRL-k over a stream (a
    thread, a process or Ray actors: one batch a step, the weights applied in flight), or
    PPO-off-policy-k (k batches a step from a round on frozen weights, the weights at the next round)."""

    def ready(self) -> None:
        """Block until the generator can generate (its start-up is not compute)."""
        ...

    def collect(
        self, version: int, new_filler: Callable[[], Filler], observe: Callable[[Group], None]
    ) -> list[MiniBatch]:
        """The next step's batches (PPO-off-policy: k of them), each filled until `new_filler()`'s rule is met;
        `observe` sees each group taken, in order (raises the generator's error if it failed)."""
        ...

    def send(self, update: TrainerUpdate) -> None:
        """After every optimizer step: the new weights and the prompts retired since the last (never sampled
        again)."""
        ...

    def sampler_state(self) -> dict:
        """Position of the prompt sampler (for checkpoints)."""
        ...

    def pause(self) -> None:
        """Start no new prompt until `resume()` (while the trainer evaluates); the thread and process
        transports also hold the sequences in flight (their generator shares the trainer's machine),
        Ray's generators finish theirs."""
        ...

    def resume(self) -> None: ...

    def processes(self) -> dict[str, int]:
        """The generator processes it runs on this machine, name -> pid (`generator0`, ...), whose
        resident memory goes into every training row (`scalerl.run.memory`)."""
        ...

    def device_memory(self) -> dict[str, tuple[float, float]]:
        """The CUDA memory (allocated, reserved MiB) of each generator process it runs ({} on a CPU,
        or where the generator shares the trainer's process)."""
        ...

    def close(self) -> None: ...
