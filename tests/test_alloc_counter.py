"""Exactness of the NEP-49 allocation counter (hybridad._alloc)."""

import contextvars
import ctypes
import threading
import tracemalloc

import numpy as np
import pytest
from numpy._core.multiarray import get_handler_name

from hybridad._alloc import AllocationCounts, assert_no_alloc, count_allocations

N = 1000


@pytest.fixture
def abc():
    return np.ones(N), np.full(N, 2.0), np.empty(N)


def test_empty_is_one_allocation_of_80_bytes():
    with count_allocations() as c:
        assert get_handler_name() == "hybridad_counting"
        x = np.empty(10)
    assert get_handler_name() == "default_allocator"
    assert isinstance(c, AllocationCounts)
    assert (c.allocations, c.bytes, c.reallocs, c.frees) == (1, 80, 0, 0)
    del x


def test_binary_op_allocates_its_result(abc):
    a, b, _ = abc
    with count_allocations() as c:
        r = a + b
    assert (c.allocations, c.bytes, c.frees) == (1, 8 * N, 0)
    assert r[0] == 3.0


def test_out_argument_allocates_nothing(abc):
    a, b, out = abc
    with count_allocations() as c:
        np.add(a, b, out=out)
    assert (c.allocations, c.bytes, c.reallocs, c.frees) == (0, 0, 0, 0)


def test_temporaries_are_counted_even_when_freed(abc):
    a, b, _ = abc
    filters = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(filters)
        with count_allocations() as c:
            r = np.exp(a) * 2 + b
        after = tracemalloc.take_snapshot().filter_traces(filters)
    finally:
        tracemalloc.stop()
    with count_allocations() as again:
        r2 = np.exp(a) * 2 + b
    # exp, *, + results at least; no elision for 8 kB arrays.  numpy 2 also
    # turns the Python scalar 2 into small 0-d arrays (5 in total here).
    assert c.allocations >= 3
    assert c.allocations == again.allocations and c.bytes == again.bytes
    assert c.frees == c.allocations - 1  # everything but ``r`` died in the block
    net_blocks = sum(d.count_diff for d in after.compare_to(before, "filename"))
    assert net_blocks == 1 < c.allocations  # a snapshot diff only sees ``r``
    np.testing.assert_array_equal(r, r2)


def test_counts_are_live_inside_the_block():
    with count_allocations() as c:
        assert c.allocations == 0
        x = np.empty(4)
        assert (c.allocations, c.bytes) == (1, 32)
        y = np.zeros(3)
        assert (c.allocations, c.bytes) == (2, 56)
    x2 = np.empty(4)  # after the block: frozen, not counted
    assert (c.allocations, c.bytes) == (2, 56)
    del x, y, x2


def test_nesting_and_handler_restoration():
    outer_name = get_handler_name()
    assert outer_name == "default_allocator"
    with count_allocations() as outer:
        x = np.empty(5)
        with count_allocations() as inner:
            y = np.empty(7)
        assert get_handler_name() == "hybridad_counting"
        z = np.empty(9)
    assert get_handler_name() == outer_name
    assert (inner.allocations, inner.bytes) == (1, 56)
    assert (outer.allocations, outer.bytes) == (3, 8 * (5 + 7 + 9))
    del x, y, z


def test_previous_handler_restored_after_exception():
    from hybridad import _alloc

    name, capsule = get_handler_name(), _alloc._get_handler()
    assert name == "default_allocator"
    with pytest.raises(ZeroDivisionError), count_allocations():
        np.empty(3)
        _ = 1 / 0
    assert get_handler_name() == name
    assert _alloc._get_handler() is capsule


def test_freeing_across_the_switch_is_safe():
    old = np.empty(100)  # default handler
    with count_allocations() as c1:
        new = np.empty(100)
        del old  # freed by numpy's default handler: not ours
    assert (c1.allocations, c1.frees) == (1, 0)
    with count_allocations() as c2:
        del new  # freed by its own (counting) handler
    assert (c2.allocations, c2.frees) == (0, 1)


def test_realloc_is_counted():
    with count_allocations() as c:
        x = np.empty(10)
        x.resize(1000, refcheck=False)
    assert (c.allocations, c.bytes, c.reallocs) == (1, 80, 1)
    x[:] = 1.0
    assert x.sum() == 1000.0


def test_callbacks_directly():
    from hybridad import _alloc

    counters = np.zeros(4, dtype=np.int64)
    ctx = counters.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    p = _alloc._counting_malloc.ctypes(ctx, 24)
    q = _alloc._counting_calloc.ctypes(ctx, 3, 8)
    r = _alloc._counting_realloc.ctypes(ctx, 0, 40)  # realloc(NULL) allocates
    assert p and q and r
    assert counters.tolist() == [3, 88, 0, 0]
    p = _alloc._counting_realloc.ctypes(ctx, p, 4096)
    for ptr in (p, q, r, 0):  # free(NULL) is not a free
        _alloc._counting_free.ctypes(ctx, ptr, 0)
    assert counters.tolist() == [3, 88, 1, 3]


def test_assert_no_alloc(abc):
    a, b, out = abc
    counts = assert_no_alloc(np.add, a, b, out=out, n=50)
    assert (counts.allocations, counts.bytes) == (0, 0)
    with pytest.raises(AssertionError, match=r"allocated 50 numpy buffers \(400000 bytes"):
        assert_no_alloc(np.add, a, b, n=50)


def test_thousand_allocations_and_frees():
    for _ in range(3):
        with count_allocations() as c:
            for i in range(N):
                x = np.empty(16)
                x[0] = i
            del x
        assert (c.allocations, c.bytes, c.frees) == (N, N * 128, N)
    assert get_handler_name() != "hybridad_counting"


def test_handler_is_per_context_not_per_process():
    def work():
        np.empty(8)

    with count_allocations() as c:
        t = threading.Thread(target=work)  # fresh context: default handler
        t.start()
        t.join()
    assert c.allocations == 0
    with count_allocations() as c:
        t = threading.Thread(target=contextvars.copy_context().run, args=(work,))
        t.start()
        t.join()
    assert (c.allocations, c.bytes) == (1, 64)
