"""The scheduler: token budget, chunked prefill mixed with decodes, FCFS, preemption, abort."""

from __future__ import annotations

import random

from deepinfer.config import SchedulerConfig
from deepinfer.engine.kv_manager import KVManager
from deepinfer.engine.request import Request, RequestStatus
from deepinfer.engine.scheduler import Scheduler
from deepinfer.sampling_params import SamplingParams
from deepinfer.worker.protocol import ModelRunnerOutput, SchedulerOutput

BS = 4


def make_scheduler(num_blocks=64, max_num_seqs=8, budget=32, prefix_caching=True):
    kv = KVManager(num_blocks, BS, num_state_slots=max_num_seqs, enable_prefix_caching=prefix_caching)
    return Scheduler(SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget), kv)


_order = iter(range(10**9))


def make_request(rid, prompt_len, max_tokens=4):
    """A request whose prompt shares no prefix with any other."""
    order = next(_order)
    tokens = [1000 * (order + 1) + i for i in range(prompt_len)]
    return Request(rid, tokens, SamplingParams(max_tokens=max_tokens, ignore_eos=True), sampling_seed=0,
                   eos_token_ids=frozenset(), max_model_len=10_000, arrival_order=order)


def fake_run(sched: Scheduler, out: SchedulerOutput, rng=random) -> ModelRunnerOutput:
    """What a model runner would return, called right after ``schedule()``: one token for each
    request whose tokens are all computed once the step has run."""
    ids, sampled = [], []
    for rid in out.num_scheduled_tokens:
        req = sched.requests[rid]
        ids.append(rid)
        sampled.append([rng.randrange(100, 200)] if req.num_inflight_tokens else [])
    return ModelRunnerOutput(ids, sampled, [None] * len(ids))


def step(sched: Scheduler):
    out = sched.schedule()
    return out, sched.update_from_output(out, fake_run(sched, out))


def test_prefill_chunk_and_decodes_share_a_step():
    sched = make_scheduler(budget=8)
    a = make_request("a", 5)
    sched.add_request(a)
    out, _ = step(sched)
    assert out.num_scheduled_tokens == {"a": 5}
    b = make_request("b", 20)
    sched.add_request(b)
    out, _ = step(sched)
    assert out.num_scheduled_tokens == {"a": 1, "b": 7}, "a decode and a prefill chunk in one step"
    out, _ = step(sched)
    assert out.num_scheduled_tokens == {"a": 1, "b": 7}
    out, result = step(sched)
    assert out.num_scheduled_tokens == {"a": 1, "b": 6}
    assert b in result.updated, "the last chunk of the prompt samples the first token"


def test_budget_and_max_num_seqs_are_respected():
    sched = make_scheduler(budget=10, max_num_seqs=3)
    for i in range(6):
        sched.add_request(make_request(f"r{i}", 7, max_tokens=3))
    while sched.has_unfinished_requests():
        out, _ = step(sched)
        assert out.total_num_scheduled_tokens <= 10
        assert len(sched.running) <= 3


def test_admission_is_first_come_first_served():
    sched = make_scheduler(num_blocks=8, budget=64)  # 7 usable blocks = 28 tokens
    sched.add_request(make_request("first", 8, max_tokens=4))  # 2 blocks
    big = make_request("big", 24, max_tokens=4)  # 6 blocks: does not fit beside "first"
    sched.add_request(big)
    small = make_request("small", 2, max_tokens=1)
    sched.add_request(small)
    out, _ = step(sched)
    assert "first" in out.num_scheduled_tokens
    assert "big" not in out.num_scheduled_tokens and "small" not in out.num_scheduled_tokens, \
        "a small request may not overtake the big one waiting before it"


def test_preemption_takes_the_youngest_and_requeues_it_first():
    sched = make_scheduler(num_blocks=7, budget=64, prefix_caching=False)  # 6 usable blocks
    old = make_request("old", 8, max_tokens=8)
    young = make_request("young", 8, max_tokens=8)
    later = make_request("later", 1, max_tokens=1)
    sched.add_request(old)
    sched.add_request(young)
    step(sched)  # both prefilled: 2 + 2 blocks (+1 each for their first decode token soon)
    sched.add_request(later)
    preempted_step = None
    for i in range(8):
        out, _ = step(sched)
        if young.status == RequestStatus.PREEMPTED:
            preempted_step = out
            break
    assert preempted_step is not None, "the pool was meant to run out"
    assert old.status == RequestStatus.RUNNING
    assert sched.waiting[0] is young, "the preempted request is first in line again"
    assert "later" not in preempted_step.num_scheduled_tokens, "no admission in a step that preempted"
    assert young.num_computed_tokens == 0 and young.metrics.num_preemptions == 1
    while sched.has_unfinished_requests():
        step(sched)
    assert old.num_output_tokens == young.num_output_tokens == 8


def test_nobody_starves_under_memory_pressure():
    rng = random.Random(0)
    sched = make_scheduler(num_blocks=24, max_num_seqs=6, budget=16)
    requests = [make_request(f"r{i}", rng.randint(1, 30), max_tokens=rng.randint(1, 40)) for i in range(40)]
    for r in requests:
        sched.add_request(r)
    victims_were_youngest = True
    for _ in range(5000):
        if not sched.has_unfinished_requests():
            break
        before = {r.request_id for r in sched.running}
        oldest = min((r.arrival_order for r in sched.running), default=None)
        step(sched)
        for r in requests:
            if r.request_id in before and r.status == RequestStatus.PREEMPTED and r.arrival_order == oldest:
                victims_were_youngest = False
    assert not sched.has_unfinished_requests(), "every request finishes"
    assert all(r.num_output_tokens == r.max_tokens for r in requests)
    assert sched.num_preemptions > 0
    assert victims_were_youngest, "the oldest running request is never preempted"
    assert sched.kv.pool.num_free == sched.kv.pool.num_usable


def test_abort_frees_waiting_and_running_requests():
    sched = make_scheduler(max_num_seqs=1)
    a, b = make_request("a", 6), make_request("b", 6)
    sched.add_request(a)
    sched.add_request(b)
    step(sched)
    assert a.status == RequestStatus.RUNNING and b.status == RequestStatus.WAITING
    ended = sched.finish_requests(["a", "b", "unknown"], RequestStatus.FINISHED_ABORTED)
    assert {r.request_id for r in ended} == {"a", "b"}
    assert not sched.has_unfinished_requests()
    assert sched.kv.pool.num_free == sched.kv.pool.num_usable
    out = sched.schedule()
    assert out.is_empty and out.finished_request_ids == {"a"}, "the runner is told to drop a's state"


def test_runner_gets_deltas_for_running_requests():
    sched = make_scheduler(budget=64)
    sched.add_request(make_request("a", 3, max_tokens=8))
    out, _ = step(sched)
    assert [n.request_id for n in out.new_requests] == ["a"] and not out.cached_requests
    for _ in range(3):
        out, _ = step(sched)
        assert not out.new_requests and [c.request_id for c in out.cached_requests] == ["a"]
    # Token 4 opened a second block: exactly one delta carried it.
    assert sum(len(c.new_block_ids) for c in out.cached_requests) in (0, 1)
    assert len(sched.kv.block_ids("a")) == 2
