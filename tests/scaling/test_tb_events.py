"""scalerl.scaling.events: TensorBoard event files read without the tensorboard package, checked
against tensorboard's own EventAccumulator (installed with the `train` extra) on the same files."""

from pathlib import Path

import pytest

from scalerl.errors import ScaleRLError
from scalerl.scaling.events import read_scalars

TRL = Path(__file__).parents[1] / "fixtures" / "trl_grpo"
ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def accumulator_scalars(path):
    acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def write_events(folder, events):
    """events: protobuf Event messages -> one event file (the writer adds its file_version event)."""
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    for event in events:
        writer.add_event(event)
    writer.close()
    (f,) = Path(folder).glob("events.out.tfevents*")
    return f


def scalar(step, tag, value, wall=None):
    from tensorboard.compat.proto import event_pb2, summary_pb2

    summ = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    return event_pb2.Event(step=step, wall_time=float(step) if wall is None else wall, summary=summ)


def test_a_real_trl_run_reads_as_event_accumulator_reads_it():
    (f,) = TRL.glob("events.out.tfevents*")
    ours = read_scalars(f)
    assert ours == accumulator_scalars(f)
    assert len(ours) > 40 and len(ours["eval/reward"]) > 5


def test_torch_summary_writer_both_styles(tmp_path):
    """torch's SummaryWriter (what scalerl train and TRL write): simple_value, and a rank-0 tensor
    with new_style=True (EventAccumulator files that under tensors, not scalars)."""
    tb = pytest.importorskip("torch.utils.tensorboard")
    writer = tb.SummaryWriter(str(tmp_path))
    for step in range(5):
        writer.add_scalar("a/old", 0.5 * step, step, walltime=100.0 + step)
        writer.add_scalar("a/new", 0.25 * step, step, walltime=100.0 + step, new_style=True)
    writer.close()
    (f,) = tmp_path.glob("events.out.tfevents*")
    ours = read_scalars(f)
    assert ours["a/old"] == accumulator_scalars(f)["a/old"]
    assert ours["a/new"] == [(s, 100.0 + s, 0.25 * s) for s in range(5)]


def test_a_restarted_writer_drops_the_orphaned_steps(tmp_path):
    from tensorboard.compat.proto import event_pb2

    start = event_pb2.Event(step=3, wall_time=3.5, session_log=event_pb2.SessionLog(status=1))
    events = [scalar(s, "r", 0.1 * s) for s in range(6)] + [start] + [scalar(s, "r", 1.0 + s) for s in (3, 4)]
    f = write_events(tmp_path, events)
    ours = read_scalars(f)
    assert ours == accumulator_scalars(f)
    assert [s for s, _, _ in ours["r"]] == [0, 1, 2, 3, 4] and ours["r"][-1][2] == 5.0


def test_a_damaged_record_before_the_end_is_an_error_naming_the_byte(tmp_path):
    f = write_events(tmp_path, [scalar(s, "r", 0.1 * s) for s in range(4)])
    data = bytearray(f.read_bytes())
    second = 12 + int.from_bytes(data[:8], "little") + 4  # after the file_version record
    data[second + 12] ^= 0xFF  # the second record's first byte
    f.write_bytes(bytes(data))
    with pytest.raises(ScaleRLError, match=f"damaged TensorBoard record at byte {second} "):
        read_scalars(f)


def test_not_an_event_file_is_one_line(tmp_path):
    f = tmp_path / "events.out.tfevents.x"
    f.write_bytes(b"hello, this is not a TFRecord file at all")
    with pytest.raises(ScaleRLError):
        read_scalars(f)
