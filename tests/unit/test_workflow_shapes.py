"""The pure rules of jobrun/workflows.py: a shape's edges (flatten) and a graph's order with
its cycles refused (order), as properties over generated shapes and graphs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, strategies as st

from jobrun import workflows as wf
from jobrun.errors import InvalidInput

steps = st.builds(wf.Step, st.sampled_from(["a", "b", "c"]))
shapes = st.recursive(steps, lambda inner: st.one_of(
    st.lists(inner, min_size=1, max_size=4).map(lambda m: wf.chain(*m)),
    st.lists(inner, min_size=1, max_size=4).map(lambda m: wf.group(*m))), max_leaves=25)


def reaches(edges, n):
    """reach[i]: every position i waits for, directly or not."""
    parents = {i: {p for d, p in edges if d == i} for i in range(n)}
    reach = {}
    for i in range(n):  # parents come first, so theirs are known
        reach[i] = set(parents[i]).union(*(reach[p] for p in parents[i]))
    return reach


@given(shapes)
def test_edges_point_backwards_between_steps_and_heads_and_tails_are_the_ends(shape):
    flat = wf.flatten(shape)
    n = len(flat.steps)
    assert all(0 <= p < d < n for d, p in flat.edges)  # so no cycle can be written
    assert len(set(flat.edges)) == len(flat.edges)
    waits = {d for d, _ in flat.edges}
    fed = {p for _, p in flat.edges}
    assert sorted(flat.heads) == [i for i in range(n) if i not in waits]
    assert sorted(flat.tails) == [i for i in range(n) if i not in fed]


@given(st.lists(shapes, min_size=2, max_size=4))
def test_in_a_chain_every_step_of_a_member_waits_for_every_step_of_the_ones_before(members):
    flat = wf.flatten(wf.chain(*members))
    reach = reaches(flat.edges, len(flat.steps))
    sizes = [len(wf.flatten(m).steps) for m in members]
    starts = list(itertools.accumulate([0] + sizes[:-1]))
    for k in range(1, len(members)):
        for i in range(starts[k], starts[k] + sizes[k]):
            assert set(range(starts[k])) <= reach[i]


@given(st.lists(shapes, min_size=1, max_size=4))
def test_a_group_adds_no_edge_between_its_members(members):
    flat = wf.flatten(wf.group(*members))
    inner = sum(len(wf.flatten(m).edges) for m in members)
    assert len(flat.edges) == inner


def test_a_chord_callback_waits_for_each_member():
    flat = wf.flatten(wf.chord(["p", "q", "r"], "cb"))
    assert flat.edges == [(3, 0), (3, 1), (3, 2)] and flat.heads == [0, 1, 2]


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 8))
    names = [f"s{i}" for i in range(n)]
    after = {name: draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
             for name in names}
    return names, after


def has_cycle(names, after):
    state = {}

    def visit(n):
        if state.get(n) == 1:
            return True
        if state.get(n) == 2:
            return False
        state[n] = 1
        if any(visit(p) for p in after.get(n, ())):
            return True
        state[n] = 2
        return False

    return any(visit(n) for n in names)


@given(graphs())
def test_order_puts_parents_first_or_names_a_real_cycle(graph):
    names, after = graph
    if has_cycle(names, after):
        with pytest.raises(InvalidInput) as refused:
            wf.order(names, after)
        cycle = str(refused.value).removeprefix("a cycle: ").split(" -> ")
        assert cycle[0] == cycle[-1]
        # Each named step waits for the next one named.
        assert all(b in after[a] for a, b in zip(cycle[::-1], cycle[::-1][1:]))
    else:
        ordered = wf.order(names, after)
        assert sorted(ordered) == sorted(names)
        at = {n: i for i, n in enumerate(ordered)}
        assert all(at[p] < at[n] for n in names for p in after[n])
        built = wf.graph({n: "t" for n in names}, after)
        assert all(p < d for d, p in built.edges)


def test_bad_shapes_are_one_line():
    with pytest.raises(InvalidInput, match="unknown step 'x'"):
        wf.order(["a"], {"a": ["x"]})
    with pytest.raises(InvalidInput, match=r"^workflow.chain\[1\]: unknown field 'oops'"):
        wf.from_spec({"chain": ["a", {"task": "b", "oops": 1}]})
    with pytest.raises(InvalidInput, match="one of task, chain, group, chord or graph"):
        wf.from_spec({"chain": ["a"], "group": ["b"]})


def test_bad_steps_are_refused_before_anything_is_sent():
    def first_step(flow):
        return next(wf.enqueue_workflow(None, 1024, flow))

    with pytest.raises(InvalidInput, match="^workflow job 2: after is a list of job ids, not int$"):
        first_step(wf.chain("a", wf.Step("b", after=5)))
    with pytest.raises(InvalidInput, match="^workflow job 1: invalid on_parent_failure 'later'"):
        first_step(wf.Step("a", on_parent_failure="later"))
    with pytest.raises(InvalidInput, match="at most 1000000 dependencies, not 1002001"):
        first_step(wf.chain(wf.group(*["a"] * 1001), wf.group(*["b"] * 1001)))
