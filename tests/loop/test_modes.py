"""The declared mode protocol (`scalerl.assembly.modes.Mode`): what `make_mode` returns, every mode implements
it, and it declares exactly what the loop asks of a mode."""

import inspect
import re
import typing
from pathlib import Path

from scalerl.batching import PipelineRL, PPOOffPolicy
from scalerl.assembly.modes import Mode, make_mode
from scalerl.assembly.ray import RayPipelineRL

MODES = (PipelineRL, PPOOffPolicy, RayPipelineRL)


def _members(cls) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def test_make_mode_is_typed_with_the_protocol_and_every_mode_implements_it():
    assert typing.get_type_hints(make_mode)["return"].__args__[0] is Mode
    for cls in MODES:
        mode = cls.__new__(cls)
        assert isinstance(mode, Mode), cls.__name__
        for name in _members(Mode):   # the same parameters as the protocol's
            ours = list(inspect.signature(getattr(Mode, name)).parameters)
            assert list(inspect.signature(getattr(cls, name)).parameters) == ours, (cls.__name__, name)


def test_the_protocol_declares_what_the_loop_asks_of_a_mode():
    loop = (Path(__file__).resolve().parents[2] / "scalerl" / "loop.py").read_text()
    asked = set(re.findall(r"self\.mode\.(\w+)", loop)) | {"close", "processes"}   # build/run.py: close, memory
    assert asked == _members(Mode)
    assert not isinstance(object(), Mode)
