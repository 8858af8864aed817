"""`RayRollouts`: the PipelineRL `RolloutSource` over N generator actors and a hub actor.

    GeneratorWorker x N --admit(prompt)--> RolloutHub <--take()-- trainer (RayRollouts.get)
        (engine, reward,   --deliver(group)->  queue of scored groups, leases, sampler states,
         GroupAssembler)   <-weights ref----   latest weights (one ray.put per version)

Each generator actor wraps the same pieces as the in-process transports (the engine or any
`Generator` from the same `GeneratorBuild` as `ProcessRollouts`, the reward, `GroupAssembler`,
`CurriculumSampler`) and streams continuously; with `rollout.engine: vllm` the engine is a client
that starts a vLLM server of its own beside the actor (the weights go through the actor's own
folder; the server never outlives the actor: scalerl.rollout.vllm_guard), closed at the run's end
(`GeneratorWorker.shutdown`). The hub is the one place that decides:

- Prompts: actor r of N takes every N-th prompt of the shared seeded prompt stream, from offset
  r (`ShardSampler`), so no prompt is drawn by two actors. Before starting one it asks the hub
  (`admit`), which answers at once: 'wait' while the PipelineRL-k `Window` (window.py) or a
  pause holds every start back (the actor keeps decoding what it has in flight and asks again),
  'retired' for a retired prompt (No-Positive-Resampling), or 'go' with the draw number, the
  same numbering and the same rule as the in-process transports, and a lease.
- Groups: `deliver` stores a group only against an open lease of the actor's *current*
  incarnation and closes the lease; the trainer `take`s groups in draw order: every group
  reaches the trainer whole, exactly once and in order.
  When an actor dies, Ray restarts it (`max_restarts`); the new incarnation `register`s, takes
  over the open leases (the groups that were in flight, with their draw numbers) and
  regenerates them first; a late delivery from the dead incarnation is refused
  (`ray/rejected_groups`).
- Weights: `send` puts the state dict in the object store once and hands the reference to
  the hub; every actor waits on the hub for a newer version and applies it in flight
  (`Generator.update_weights`); a restarted actor starts from the latest one. With
  `ray.publish: broadcast` the hub only announces the version (and counts the publishes), and
  `send` broadcasts the weights to the actors bucket by bucket over a group of their own
  (broadcast.py); each actor receives every announced publish in order and stages the latest.
  Such a group's members are fixed: after a restart the trainer forms a new one (`Broadcasting`).
- Completion ids stay unique across actors and restarts: the engine's ids carry its seed, and
  each (rank, incarnation) gets its own seed.

Departures from the in-process transports (local.py):
1. Sampler state is kept per actor (`ranks`), plus the furthest position over all actors at the
   top level (the in-process format), so a run can resume on either backend or with another
   number of generators; then all actors restart from the furthest position, skipping (never
   repeating) the prompts the slower shards had not reached.
2. Prompts in flight or queued at a checkpoint are not regenerated after a resume (as in
   process); only an actor restart within a run regenerates its in-flight groups.
"""

from __future__ import annotations

import gc
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Callable

import ray
import torch

from scalerl.errors import ScaleRLError
from scalerl.transport.broadcast import Receiver, Sender, backend_for, open_link, plan_buckets
from scalerl.transport.policy import PipelineRL, Streamed
from scalerl.transport.protocol import Filler, GeneratorBuild, MiniBatch, TrainerUpdate
from scalerl.transport.window import GroupAssembler, Window
from scalerl.types import Group, Prompt

POLL_S = 1.0  # trainer: seconds per hub poll before checking that the actors are alive
SHUTDOWN_S = 60.0  # how long the end of a run waits for the actors to close their generators (a server's stop)
MAX_RETIRED_IN_A_ROW = 100_000


# ==================================================================== prompt shards
class ShardSampler:
    """Every `world`-th prompt of a CurriculumSampler, from offset `rank`: disjoint shards.

    The sampler itself ignores the curriculum (the hub refuses retired prompts), so that the
    raw stream, and therefore the split, is the same in every actor.
    """

    def __init__(self, sampler, rank: int, world: int, state: dict):
        self.sampler, self.rank, self.world = sampler, rank, world
        sampler.load_state_dict(state)
        self.drawn = int(state.get("drawn", 0))

    def next(self) -> Prompt:
        while True:
            prompt = next(self.sampler)
            index, self.drawn = self.drawn, self.drawn + 1
            if index % self.world == self.rank:
                return prompt

    def state_dict(self) -> dict:
        return {**self.sampler.state_dict(), "drawn": self.drawn}


def split_sampler_state(state: dict, world: int) -> list[dict]:
    """Per-actor start states from a checkpoint's sampler state (either backend's format)."""
    ranks = state.get("ranks")
    if ranks is not None and len(ranks) == world:
        return [dict(r) for r in ranks]
    base = {k: int(state[k]) for k in ("seed", "epoch", "position")}
    return [{**base, "drawn": 0} for _ in range(world)]


def merge_sampler_states(ranks: list[dict]) -> dict:
    """The checkpoint form: the furthest position at the top level, every actor's under `ranks`."""
    furthest = max(ranks, key=lambda s: (s["epoch"], s["position"]))
    return {
        "seed": furthest["seed"],
        "epoch": furthest["epoch"],
        "position": furthest["position"],
        "ranks": [dict(r) for r in ranks],
    }


# ==================================================================== hub actor
@dataclass
class _Rank:
    state: dict  # ShardSampler state after the last admitted prompt
    incarnation: int = 0  # 0: never registered; 1: first start; 2+: restarts
    leases: dict[int, Prompt] = field(default_factory=dict)  # draw -> prompt, group not delivered yet
    completions: int = 0  # completions delivered (in accepted groups)
    idle_s: float = 0.0  # seconds the actor was held back (window or pause) before a start
    waiting_since: float | None = None
    refused_on: int = -1  # the weights it decoded with when it was last held back
    regenerated: int = 0  # leases a restarted incarnation took over from a dead one
    retired_in_a_row: int = 0


class RolloutHub:
    """Leases, draws, the groups waiting for the trainer, the weights reference and the counters
    (a threaded Ray actor)."""

    def __init__(self, states: list[dict], window: Window, weights: list, version: int):
        self.ranks = [_Rank(state=s) for s in states]
        self.window = window
        window.publish(version, 0)
        self.admitted = 0  # the next draw number
        self.taken = 0  # draws handed to the trainer (in order)
        self.groups: dict[int, Group] = {}
        self.retired: set[str] = set()
        self.weights, self.version = weights, version  # [ObjectRef] (a list keeps the ref unresolved)
        self.sequence = 0  # publishes made in the current group (broadcast: each one to receive)
        self.epoch, self.group = 0, None  # ray.publish broadcast: the current group, (GroupLink, layout)
        self.paused = False
        self.closed = False
        self.error: str | None = None
        self.rejected = 0
        self.cond = threading.Condition()

    def register(self, rank: int) -> dict:
        """A (re)started actor: new incarnation; it inherits the open leases of the dead one."""
        with self.cond:
            r = self.ranks[rank]
            r.incarnation += 1
            r.waiting_since = None
            if r.incarnation > 1:
                r.regenerated += len(r.leases)
            return {
                "incarnation": r.incarnation,
                "state": dict(r.state),
                "pending": sorted(r.leases.items()),
                "weights": self.weights,
                "version": self.version,
                "epoch": self.epoch,
            }

    def admit(self, rank: int, incarnation: int, prompt: Prompt, state: dict, applied: int) -> tuple[str, int]:
        """At once: ('go', draw) (leased), ('wait', -1) (the window or a pause holds it back: ask
        again), ('retired', -1) (skip it), ('stop', -1) (closed, or a stale incarnation),
        ('exhausted', -1). `applied`: the policy version the actor decodes with."""
        now = time.monotonic()
        with self.cond:
            r = self.ranks[rank]
            if self.closed or r.incarnation != incarnation:
                return "stop", -1
            if (
                self.paused
                or not self.window.may_start(self.admitted, applied, self.version, self.taken)
                or self._behind_another(r)
            ):
                r.waiting_since, r.refused_on = r.waiting_since or now, applied
                return "wait", -1
            if r.waiting_since is not None:
                r.idle_s += now - r.waiting_since
                r.waiting_since = None
            r.state = dict(state)
            if prompt.id in self.retired:
                r.retired_in_a_row += 1
                return ("exhausted" if r.retired_in_a_row >= MAX_RETIRED_IN_A_ROW else "retired"), -1
            r.retired_in_a_row = 0
            draw, self.admitted = self.admitted, self.admitted + 1
            r.leases[draw] = prompt
            return "go", draw

    def _behind_another(self, r: _Rank) -> bool:
        """Fair shares of the window: an actor yields to one that is waiting with fewer prompts in flight."""
        return any(o is not r and o.waiting_since is not None and len(o.leases) < len(r.leases) for o in self.ranks)

    def deliver(self, rank: int, incarnation: int, group: Group) -> bool:
        """Store a scored group against its open lease; False (refused) for a dead incarnation."""
        with self.cond:
            r = self.ranks[rank]
            if r.incarnation != incarnation or group.draw not in r.leases:
                self.rejected += 1
                return False
            del r.leases[group.draw]
            r.completions += len(group.completions)
            self.groups[group.draw] = group
            self.cond.notify_all()
            return True

    def fail(self, rank: int, incarnation: int, text: str) -> None:
        with self.cond:
            self.error = f"generator actor {rank} (start {incarnation}) failed:\n{text}"
            self.cond.notify_all()

    def take(self, timeout: float) -> Group | str | None:
        """The next group in draw order; the error text if an actor failed; None after `timeout` s."""
        with self.cond:
            self.cond.wait_for(
                lambda: self.taken in self.groups or self.error is not None or self.closed, timeout=timeout
            )
            if self.error is not None:
                return self.error
            group = self.groups.pop(self.taken, None)
            if group is not None:
                self.taken += 1
            return group

    def set_weights(self, weights: list | None, version: int, bound: int | None = None) -> None:
        """A new version: its object-store reference, or None when it comes by broadcast (the actors
        then receive one broadcast per publish, counted by `sequence`; the first weights' reference,
        which only a starting actor reads, is let go: no actor starts again under broadcast)."""
        with self.cond:
            self.window.set_bound(bound)
            self.window.publish(version, self.taken)
            self.weights, self.version, self.sequence = weights, version, self.sequence + 1
            self.cond.notify_all()

    def set_group(self, epoch: int, group: tuple) -> None:
        """ray.publish broadcast: the trainer formed weight-publishing group `epoch`; its publishes count from 0."""
        with self.cond:
            self.epoch, self.group, self.sequence = epoch, group, 0
            self.cond.notify_all()

    def wait_publish(self, epoch: int, known: int, timeout: float) -> tuple | None:
        """('group', epoch, (GroupLink, layout)) once a group newer than `epoch` formed; else
        ('publish', publishes made, the latest version) once more than `known` were made in it;
        None after `timeout` s or once closed."""
        with self.cond:
            self.cond.wait_for(lambda: self.epoch != epoch or self.sequence != known or self.closed, timeout=timeout)
            if self.closed:
                return None
            if self.epoch != epoch:
                return "group", self.epoch, self.group
            return ("publish", self.sequence, self.version) if self.sequence != known else None

    def wait_group(self, epoch: int, timeout: float) -> bool:
        """Whether a group newer than `epoch` forms within `timeout` s."""
        with self.cond:
            return self.cond.wait_for(lambda: self.epoch != epoch or self.closed, timeout=timeout) and not self.closed

    def incarnations(self) -> list[int]:
        with self.cond:
            return [r.incarnation for r in self.ranks]

    def wait_weights(self, known: int, timeout: float) -> tuple[list, int] | None:
        with self.cond:
            self.cond.wait_for(lambda: self.version != known or self.closed, timeout=timeout)
            return None if self.version == known or self.closed else (self.weights, self.version)

    def retire(self, prompt_id: str) -> None:
        with self.cond:
            self.retired.add(prompt_id)

    def set_paused(self, paused: bool) -> None:
        with self.cond:
            self.paused = paused
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def sampler_states(self) -> list[dict]:
        with self.cond:
            return [dict(r.state) for r in self.ranks]

    def open_leases(self, rank: int) -> list[str]:
        with self.cond:
            return sorted(p.id for p in self.ranks[rank].leases.values())

    def at_window(self) -> bool:
        """Every actor, with none in flight, was held back by the window (or a pause) while decoding with the
        newest version: the trainer is the slower side (what a test with a slow trainer waits for)."""
        with self.cond:
            return all(r.refused_on == self.version and not r.leases for r in self.ranks)

    def counters(self) -> dict:
        with self.cond:
            return {
                "queue_depth": len(self.groups),
                "rejected": self.rejected,
                "completions": [r.completions for r in self.ranks],
                "idle_s": [r.idle_s for r in self.ranks],
                "restarts": [max(0, r.incarnation - 1) for r in self.ranks],
                "regenerated": sum(r.regenerated for r in self.ranks),
                "leases": [len(r.leases) for r in self.ranks],
            }


# ==================================================================== generator actor
def actor_seed(base: int, rank: int, incarnation: int) -> int:
    """Distinct engine seed per (run seed, rank < 64, incarnation < 1024): unique completion ids."""
    return (base * 64 + rank) * 1024 + incarnation


class GeneratorWorker:
    """One generator actor: streams its shard, scores groups, delivers them to the hub."""

    def __init__(
        self,
        hub,
        rank: int,
        world: int,
        build: GeneratorBuild,
        base_seed: int,
        n: int,
        threads: int,
        publish: str = "object_store",
    ):
        from scalerl.rl.curriculum import CurriculumSampler

        torch.set_num_threads(threads)
        self.hub, self.rank = hub, rank
        reg = ray.get(hub.register.remote(rank))
        self.incarnation = reg["incarnation"]
        self.generator, task, reward_fn, sampler_seed = build(actor_seed(base_seed, rank, self.incarnation))
        self.shard = ShardSampler(CurriculumSampler(task, None, seed=sampler_seed), rank, world, reg["state"])
        self.assembler = GroupAssembler(
            n, reward_fn, GroupAssembler.workers_for(task), deliver=self._deliver, fail=self._fail
        )
        self.version = reg["version"]
        self.stop = threading.Event()
        self.receiver: Receiver | None = None  # ray.publish broadcast: this actor's member of the group
        self.received = threading.Lock()  # held while a broadcast is received and staged
        self.pending: list | None = reg["pending"]  # None once streaming
        if reg["weights"] is not None:  # under broadcast, a restart after the first publish waits for one
            self.generator.update_weights(ray.get(reg["weights"][0]), self.version)
            self._start_streaming()
        follow, args = (
            (self._follow_weights, ()) if publish == "object_store" else (self._follow_broadcast, (reg["epoch"],))
        )
        threading.Thread(target=follow, args=args, name="scalerl-weights", daemon=True).start()

    def _start_streaming(self) -> None:
        pending, self.pending = self.pending, None
        threading.Thread(target=self._stream, args=(pending,), name="scalerl-generator", daemon=True).start()

    def ping(self) -> tuple[int, int]:
        return self.rank, self.incarnation

    def weights(self, version: int) -> dict[str, torch.Tensor] | None:
        """ray.publish broadcast: a copy of the weights last received, if they are `version`'s (else
        None): what this actor staged for its engine, to check a publish against the trainer's."""
        with self.received:
            if self.receiver is None or self.version != version:
                return None
            return {name: t.to("cpu", copy=True) for name, t in self.receiver.tensors.items()}

    def shutdown(self) -> None:
        """The run's end: stop streaming and close the generator (a server's client stops the server it
        started and removes its folder). An actor that ends without this (`ray.kill`, a crash) leaves no
        server process either (scalerl.rollout.vllm_guard), only the client's temporary folder."""
        self.stop.set()
        getattr(self.generator, "close", lambda: None)()

    def _prompts(self, pending: list[tuple[int, Prompt]]):
        for draw, prompt in pending:  # the dead incarnation's groups in flight
            yield self.assembler.add_prompt(prompt, draw)
        held = None  # a prompt drawn from the shard, not yet admitted
        while not self.stop.is_set():
            prompt = held or self.shard.next()
            verdict, draw = ray.get(
                self.hub.admit.remote(
                    self.rank, self.incarnation, prompt, self.shard.state_dict(), self.generator.version
                )
            )
            held = prompt if verdict == "wait" else None
            if verdict == "exhausted":
                raise ScaleRLError(
                    f"{MAX_RETIRED_IN_A_ROW} consecutive training prompts were retired "
                    "(No-Positive-Resampling): the task looks saturated"
                )
            if verdict == "stop":
                self.stop.set()
                return
            if verdict == "wait":
                yield None  # the engine decodes what is in flight, then asks again
            elif verdict == "go":
                yield self.assembler.add_prompt(prompt, draw)

    def _deliver(self, group: Group) -> None:
        """A scored group to the hub (from the scoring thread that finished it, or inline)."""
        ray.get(self.hub.deliver.remote(self.rank, self.incarnation, group))

    def _fail(self, exc: BaseException) -> None:
        """Reported to the trainer, which raises it from RayRollouts.get."""
        self.hub.fail.remote(self.rank, self.incarnation, "".join(traceback.format_exception(exc)))
        self.stop.set()

    def _stream(self, pending: list[tuple[int, Prompt]]) -> None:
        try:
            for completion in self.generator.stream(self._prompts(pending), self.assembler.n, stop=self.stop):
                self.assembler.add(completion)  # the group goes to `_deliver` once scored
        except BaseException as exc:
            self._fail(exc)
        finally:
            self.assembler.close()

    def _follow_broadcast(self, epoch: int) -> None:
        """Join each weight-publishing group the trainer forms after `epoch` (the group when this
        start registered: a restart waits for a new one), receive every publish made in it in order
        and stage the latest; stream once weights are in (a restart after the first publish)."""
        sequence = 0
        try:
            while not self.stop.is_set():
                got = ray.get(self.hub.wait_publish.remote(epoch, sequence, POLL_S))
                if got is None:
                    continue
                kind, count, detail = got
                if kind == "group":
                    epoch, sequence = count, 0
                    with self.received:
                        self.receiver = None  # the old group's sockets closed first
                        self.receiver = Receiver(detail[0], self.rank + 1, detail[1])
                elif self._receive(count - sequence, detail, epoch):
                    sequence = count
        except BaseException as exc:
            self._fail(exc)

    def _receive(self, count: int, version: int, epoch: int) -> bool:
        """`count` publishes into the buffers, the last staged as `version`. False when the group
        broke (a member gone) and the trainer forms a new one (it then publishes again)."""
        with self.received:
            try:
                for _ in range(count):
                    self.receiver.receive()
            except ScaleRLError:
                if ray.get(self.hub.wait_group.remote(epoch, self.receiver.link.timeout_s)):
                    return False
                raise
            self.version = version
            self.generator.update_weights(self.receiver.tensors, version)
        if self.pending is not None:
            self._start_streaming()
        return True

    def _follow_weights(self) -> None:
        while not self.stop.is_set():
            got = ray.get(self.hub.wait_weights.remote(self.version, POLL_S))
            if got is not None:
                refs, version = got
                self.generator.update_weights(ray.get(refs[0]), version)
                self.version = version


# ==================================================================== trainer side
@dataclass
class RolloutSpec:
    """What the actors are built from (all picklable)."""

    build: GeneratorBuild  # build(seed) -> Stage: each actor builds its own
    generators: int
    n: int  # completions per prompt (G)
    window: Window  # the PipelineRL-k admission rule (window.py)
    base_seed: int
    threads: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    max_restarts: int = 3
    options: list[dict] = field(default_factory=list)  # extra Ray options per rank (placement)
    publish: str = "object_store"  # object_store: one ray.put per version; broadcast: broadcast.py
    bucket_mb: float = 64.0  # broadcast: bucket size
    publish_timeout_s: float = 300.0  # broadcast: joining the group, each bucket


class Broadcasting:
    """ray.publish broadcast, the trainer's side: the weight-publishing group (this process rank 0,
    actor r rank r + 1; broadcast.py), formed again with the actors' new starts after a restart."""

    def __init__(self, hub, spec: RolloutSpec, weights: dict[str, torch.Tensor], check_alive):
        self.hub, self.spec, self.check_alive = hub, spec, check_alive
        self.bucket_bytes = int(spec.bucket_mb * 2**20)
        self.epoch, self.sent, self.sender, self.members = 0, 0, None, None
        self.last: TrainerUpdate | None = None
        self.form(weights)

    def form(self, weights: dict[str, torch.Tensor]) -> None:
        """A new group of every actor's current start; returns once all joined (or raises)."""
        spec = self.spec
        host = ray.util.get_node_ip_address()
        link, store = open_link(host, spec.generators + 1, backend_for(weights, spec.gpus), spec.publish_timeout_s)
        layout = plan_buckets(weights, self.bucket_bytes)
        self.sender, self.epoch = None, self.epoch + 1
        gc.collect()  # the old group's sockets closed now, so its members stop waiting on it (a failed
        # broadcast's traceback holds it in a reference cycle: measured, it kept a member waiting for the timeout)
        ray.get(self.hub.set_group.remote(self.epoch, (link, layout)))
        self.sender = Sender(link, layout, store)
        self.members = ray.get(self.hub.incarnations.remote())

    def _restarted(self) -> bool:
        return ray.get(self.hub.incarnations.remote()) != self.members

    def publish(self, update: TrainerUpdate) -> None:
        """Announce the version to the hub, then broadcast it; a group broken by a dead actor is
        formed again once Ray restarted it, and the version sent again."""
        self.last = update
        for attempt in (1, 2):
            if self._restarted():
                self.form(update.weights)
            ray.get(self.hub.set_weights.remote(None, update.version, update.bound))
            try:
                self.sent += self.sender.send(update.weights, update.version, self.bucket_bytes)
                return
            except ScaleRLError:
                if attempt == 2:
                    raise
            self._await_restart()

    def _await_restart(self) -> None:
        """After a broken broadcast: until an actor's new start registers; raises if one is dead
        for good (restarts used up) or none starts within ray.publish_timeout_s."""
        deadline = time.monotonic() + self.spec.publish_timeout_s
        while not self._restarted():
            self.check_alive()
            if time.monotonic() > deadline:
                raise ScaleRLError(
                    f"a broadcast of the weights failed and no generator actor restarted within "
                    f"ray.publish_timeout_s = {self.spec.publish_timeout_s:g} s"
                )
            time.sleep(0.2)

    def rejoin(self) -> None:
        """While the trainer waits for data: an actor that restarted since the last publish gets a
        new group and the latest weights again (it streams only once it has them)."""
        if self.last is not None and self._restarted():
            self.publish(self.last)


class RayRollouts(Streamed):
    """`RolloutSource` (protocol.py) over generator actors, batched by PipelineRL-k; see the module docstring."""

    def __init__(self, spec: RolloutSpec, weights: dict[str, torch.Tensor], version: int, sampler_state: dict):
        self.spec = spec
        self.policy = PipelineRL(spec.window.k)
        self._weights_ref = ray.put({k: v.detach().to("cpu", copy=True) for k, v in weights.items()})
        states = split_sampler_state(sampler_state, spec.generators)
        hub_cls = ray.remote(RolloutHub).options(num_cpus=0, max_concurrency=4 * spec.generators + 8)
        self.hub = hub_cls.remote(states, spec.window, [self._weights_ref], version)
        worker_cls = ray.remote(GeneratorWorker)
        self.workers = [
            worker_cls.options(
                num_cpus=spec.cpus,
                num_gpus=spec.gpus,
                max_restarts=spec.max_restarts,
                max_concurrency=2,
                **(spec.options[r] if spec.options else {}),
            ).remote(self.hub, r, spec.generators, spec.build, spec.base_seed, spec.n, spec.threads, spec.publish)
            for r in range(spec.generators)
        ]
        ray.get([w.ping.remote() for w in self.workers])  # all started (a build error surfaces here)
        self._pings: list = [None] * spec.generators
        self.broadcasting = None
        if spec.publish == "broadcast":
            try:
                self.broadcasting = Broadcasting(self.hub, spec, weights, self._check_alive)
            except BaseException:
                self.close()  # the actors and the hub: the caller never gets this source to close
                raise
        self._last: dict = {"idle_s": [0.0] * spec.generators}

    def _check_alive(self) -> None:
        """Raise if an actor is dead for good (restarts used up); a restarting one is fine."""
        from ray.exceptions import ActorDiedError, ActorUnavailableError

        for i, worker in enumerate(self.workers):
            if self._pings[i] is None:
                self._pings[i] = worker.ping.remote()
            ready, _ = ray.wait([self._pings[i]], timeout=0)
            if not ready:
                continue
            ref, self._pings[i] = self._pings[i], None
            try:
                ray.get(ref)
            except ActorUnavailableError:
                continue
            except ActorDiedError as exc:
                raise RuntimeError(
                    f"generator actor {i} died and used up its {self.spec.max_restarts} restarts "
                    f"(ray.max_restarts): {exc}"
                ) from None

    def ready(self) -> None: ...  # the actors were built (and pinged) in __init__

    def get(self, timeout: float | None = None) -> Group:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            item = ray.get(self.hub.take.remote(POLL_S))
            if isinstance(item, Group):
                return item
            if isinstance(item, str):
                raise RuntimeError(item)
            self._check_alive()
            if self.broadcasting is not None:
                self.broadcasting.rejoin()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no rollout group arrived within {timeout} s")

    def send(self, update: TrainerUpdate) -> None:
        for prompt_id in update.retired:
            ray.get(self.hub.retire.remote(prompt_id))
        if self.broadcasting is not None:
            self._weights_ref = None
            self.broadcasting.publish(update)
            return
        self._weights_ref = ray.put({k: v.detach().to("cpu", copy=True) for k, v in update.weights.items()})
        ray.get(self.hub.set_weights.remote([self._weights_ref], update.version, update.bound))

    def collect(
        self, version: int, new_filler: Callable[[], Filler], observe: Callable[[Group], None]
    ) -> list[MiniBatch]:
        """PipelineRL-k's batch, with the hub's `ray/*` metrics in its row (a new record: a MiniBatch is not
        changed once made)."""
        *batches, last = super().collect(version, new_filler, observe)
        return [*batches, replace(last, metrics={**last.metrics, **self.step_metrics()})]

    def sampler_state(self) -> dict:
        return merge_sampler_states(ray.get(self.hub.sampler_states.remote()))

    def pause(self) -> None:
        ray.get(self.hub.set_paused.remote(True))

    def resume(self) -> None:
        ray.get(self.hub.set_paused.remote(False))

    def processes(self) -> dict[str, int]:
        """None measured from here: the actors may run on other machines (Ray's dashboard shows them)."""
        return {}

    def counters(self) -> dict:
        return ray.get(self.hub.counters.remote())

    def step_metrics(self) -> dict[str, float]:
        """`ray/*` metrics for one step: queue depth, idle time since the last call, per-actor counts."""
        c = self.counters()
        idle = [now - before for now, before in zip(c["idle_s"], self._last["idle_s"])]
        self._last = c
        out = {
            "ray/queue_depth": c["queue_depth"],
            "ray/gen_idle_seconds": sum(idle),
            "ray/rejected_groups": c["rejected"],
            "ray/restarts": sum(c["restarts"]),
            "ray/regenerated_groups": c["regenerated"],
        }
        if self.broadcasting is not None:
            out["ray/broadcast_bytes"] = self.broadcasting.sent
            out["ray/broadcast_groups"] = self.broadcasting.epoch
        for r, count in enumerate(c["completions"]):
            out[f"ray/completions/gen{r}"] = count
        return out

    def close(self) -> None:
        """Close the hub, let every actor close its generator (`SHUTDOWN_S` at most), then kill them."""
        from ray.exceptions import RayActorError

        ray.get(self.hub.close.remote())
        try:
            done, _ = ray.wait(
                [w.shutdown.remote() for w in self.workers], num_returns=len(self.workers), timeout=SHUTDOWN_S
            )
            for ref in done:
                try:
                    ray.get(ref)
                except RayActorError:
                    continue  # dead or restarting: nothing of it to close (its server died with it)
        finally:
            for worker in self.workers:
                ray.kill(worker, no_restart=True)
            ray.kill(self.hub, no_restart=True)
            self.broadcasting = None  # the broadcast group's store and process group, once its members are gone
