"""scalerl.transport.broadcast: the bucket layout, and real gloo groups (members in threads of
this process, over TCP): what the receivers get, a timeout and a member gone, each a one-line error.
The Ray run with ray.publish=broadcast is in tests/transport/test_ray.py."""

import re
import threading
import time

import pytest
import torch

from scalerl.errors import ScaleRLError
from scalerl.transport.broadcast import GroupLink, Receiver, Sender, backend_for, open_link, plan_buckets


def _weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    embed = torch.randn(10, 4)
    return {
        "embed.weight": embed,
        "layer.w": torch.randn(4, 4),
        "layer.b": torch.randn(4),
        "count": torch.arange(3),
        "head.weight": embed,
    }  # head tied to embed: one storage


def test_buckets_hold_each_storage_once_in_order_split_by_dtype_and_size():
    w = _weights()
    layout = plan_buckets(w, bucket_bytes=4 * 50)  # 50 fp32 elements a bucket
    # embed (40) alone: + layer.w (16) would be 56 > 50; layer.w + layer.b (20); count: int64, its own
    assert [[e.names for e in b.entries] for b in layout] == [
        [("embed.weight", "head.weight")],
        [("layer.w",), ("layer.b",)],
        [("count",)],
    ]
    assert [(b.dtype, b.numel) for b in layout] == [(torch.float32, 40), (torch.float32, 20), (torch.int64, 3)]
    assert [e.offset for e in layout[1].entries] == [0, 16]
    assert len(plan_buckets(w, bucket_bytes=1)) == 4  # each storage alone
    assert backend_for(w, generator_gpus=1) == "gloo"  # CPU tensors: gloo whatever the generators have


def _group(world: int, timeout_s: float):
    """(the link, the store rank 0 hosts for it at a port the OS picked: `Sender` takes both)."""
    return open_link("127.0.0.1", world, "gloo", timeout_s)


def _start_receivers(link: GroupLink, layout, out: dict, publishes: int) -> list[threading.Thread]:
    def member(rank: int) -> None:
        try:
            receiver = Receiver(link, rank, layout)
            out[rank] = []
            for _ in range(publishes):
                receiver.receive()
                out[rank].append({k: v.clone() for k, v in receiver.tensors.items()})
        except ScaleRLError as exc:
            out[rank] = exc

    threads = [threading.Thread(target=member, args=(r,), daemon=True) for r in range(1, link.world)]
    for t in threads:
        t.start()
    return threads


def test_two_receivers_get_every_publish_bit_for_bit_over_gloo():
    w = _weights()
    layout = plan_buckets(w, bucket_bytes=4 * 50)
    (link, store), got = _group(3, 30), {}
    threads = _start_receivers(link, layout, got, publishes=2)
    sender = Sender(link, layout, store)
    second = {k: (v * 2 if v.dtype == torch.float32 else v + 1) for k, v in w.items()}
    second["head.weight"] = second["embed.weight"]  # still tied
    sent = [sender.send(w, 1, 4 * 50), sender.send(second, 2, 4 * 50)]
    for t in threads:
        t.join(30)
    assert sent == [(40 + 16 + 4) * 4 + 3 * 8] * 2  # tied weights sent once
    for rank in (1, 2):
        assert [sorted(p) for p in got[rank]] == [sorted(w)] * 2
        for publish, want in zip(got[rank], (w, second)):
            assert all(torch.equal(publish[k], want[k]) for k in want)
    retied = dict(second, extra=torch.zeros(1))
    with pytest.raises(ScaleRLError, match="version 3's weights differ in names, shapes or dtypes"):
        sender.send(retied, 3, 4 * 50)


def test_a_receiver_waiting_for_a_publish_that_never_comes_fails_after_the_timeout():
    w = _weights()
    layout = plan_buckets(w, bucket_bytes=10**6)  # fp32 and int64: 2 buckets
    (link, store), got = _group(2, 2), {}
    threads = _start_receivers(link, layout, got, publishes=1)
    sender = Sender(link, layout, store)  # joins, then never sends
    start = time.monotonic()
    threads[0].join(30)
    del sender
    assert isinstance(got[1], ScaleRLError)
    assert 1.5 < time.monotonic() - start < 20
    message = str(got[1])
    assert "\n" not in message
    assert "weight-publishing group (gloo, 2 members at 127.0.0.1:" in message
    assert 1.9 <= float(re.search(r"receiving bucket 1/2 of a publish failed after (\d+\.\d) s", message)[1]) < 20
    assert "(limit ray.publish_timeout_s = 2 s; a member gone?" in message


def test_a_member_that_never_joins_fails_the_sender_after_the_timeout():
    layout = plan_buckets(_weights(), bucket_bytes=10**6)
    link, store = _group(3, 2)
    start = time.monotonic()
    with pytest.raises(
        ScaleRLError,
        match=r"3 members at .*rank 0\): not every member joined within "
        r"ray.publish_timeout_s = 2 s",
    ):
        Sender(link, layout, store)  # nobody else joins
    assert time.monotonic() - start < 20


def _join_and_die(link: GroupLink, layout) -> None:
    import os

    Receiver(link, 1, layout)
    os._exit(0)  # gone without a word, like a killed actor


def test_a_receiver_process_gone_fails_the_next_publish_at_once():
    import multiprocessing

    w = {"w": torch.ones(1_000_000)}  # 4 MB: more than a socket buffer holds
    layout = plan_buckets(w, bucket_bytes=10**8)
    link, store = _group(2, 60)
    proc = multiprocessing.get_context("fork").Process(target=_join_and_die, args=(link, layout), daemon=True)
    proc.start()
    sender = Sender(link, layout, store)
    proc.join(30)
    start = time.monotonic()
    with pytest.raises(
        ScaleRLError,
        match=r"the broadcast of bucket 1/1 of version 1 failed after \d+\.\d s "
        r"\(limit ray.publish_timeout_s = 60 s; a member gone\?",
    ):
        sender.send(w, 1, 10**8)
    assert time.monotonic() - start < 30  # not the 60 s timeout: the peer's socket closed
