"""The one seam between the loop and generation (`scalerl.transport.protocol.RolloutSource`): `make_mode`
returns it, every source implements it (the thread, process and Ray transports under PipelineRL-k,
PPO-off-policy-k's rounds) with the protocol's parameters, and it declares exactly what the loop and the
run's build ask of a source."""

import inspect
import re
import typing
from pathlib import Path

import pytest

from scalerl.assembly.modes import make_mode
from scalerl.transport.local import ProcessRollouts, ThreadedRollouts
from scalerl.transport.policy import PipelineRL, PPOOffPolicy
from scalerl.transport.protocol import RolloutSource

SOURCES = [ThreadedRollouts, ProcessRollouts, PPOOffPolicy]
ROOT = Path(__file__).resolve().parents[2] / "scalerl"


def _members(cls) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def _sources() -> list[type]:
    try:
        from scalerl.transport.ray import RayRollouts
    except ImportError:  # the Ray extra is not installed: the in-machine sources only
        return SOURCES
    return [*SOURCES, RayRollouts]


def test_make_mode_returns_the_one_protocol_and_every_source_implements_it():
    assert typing.get_type_hints(make_mode)["return"] is RolloutSource
    for cls in _sources():
        source = cls.__new__(cls)
        assert isinstance(source, RolloutSource), cls.__name__
        for name in _members(RolloutSource):  # the same parameters as the protocol's
            ours = list(inspect.signature(getattr(cls, name)).parameters)
            assert ours == list(inspect.signature(getattr(RolloutSource, name)).parameters), (cls.__name__, name)


def test_the_protocol_declares_what_the_loop_and_the_build_ask_of_a_source():
    loop = (ROOT / "loop.py").read_text()
    build = (ROOT / "assembly" / "run.py").read_text()
    asked = set(re.findall(r"self\.source\.(\w+)", loop)) | set(re.findall(r"\bsource\.(\w+)", build))
    asked -= {"evaluator", "published_mb"}  # the process transport's own (its evaluation engine, its buffer)
    assert asked == _members(RolloutSource)
    assert not isinstance(object(), RolloutSource)


class _TakeTwo:
    """A batch rule full after two groups."""

    def __init__(self):
        self.n = 0

    @property
    def full(self) -> bool:
        return self.n >= 2

    def add(self, group) -> bool:
        self.n += 1
        return True

    def metrics(self) -> dict[str, float]:
        return {"rule/n": float(self.n)}


@pytest.mark.parametrize("k", [1, 3])
def test_pipeline_rl_takes_groups_in_draw_order_and_drops_only_those_staler_than_k(k):
    """The PipelineRL-k policy over a stream, at trainer version 5: a group whose oldest token is more than k
    versions old is dropped and counted (its tokens still generated), the others taken in draw order until
    the batch rule is full."""
    from doubles import scored
    from scalerl.types import Completion, Prompt

    def group(i: int, oldest: int):
        c = Completion(f"c{i}", f"p{i}", [1], [7, 7, 7], [0.0] * 3, [oldest, 5, 5], "", "stop")
        return scored(Prompt(f"p{i}", "x", ""), [c], [1.0], draw=i)

    oldest = [5 - k - 1, 0, 5 - k, 5, 5]  # staleness k+1, 5, k, 0, 0
    stream = iter([group(i, v) for i, v in enumerate(oldest)])
    seen = []
    (mb,) = PipelineRL(k).collect(lambda: next(stream), 5, _TakeTwo, seen.append)
    stale = [i for i, v in enumerate(oldest) if 5 - v > k]
    kept = [i for i in range(len(oldest)) if i not in stale][:2]
    assert [g.draw for g in mb.groups] == [g.draw for g in seen] == kept
    dropped = [i for i in stale if i < kept[-1]]
    assert mb.stale_dropped == len(dropped)
    assert mb.tokens_generated == 3 * (len(kept) + len(dropped))
    assert mb.metrics == {"rule/n": 2.0}
