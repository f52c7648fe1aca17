"""FeedbackCounters (seed 004 Section 4.2): per-CE counts, no lost increments under threads."""
import threading

from infosys.feedback import FeedbackCounters


def test_increment_get_reset():
    fc = FeedbackCounters()
    assert fc.get("ce1") == 0
    assert fc.increment("ce1") == 1
    assert fc.increment("ce1") == 2
    assert fc.increment("ce1/dteam", 3) == 3
    assert fc.snapshot() == {"ce1": 2, "ce1/dteam": 3}
    fc.reset()
    assert fc.get("ce1") == 0 and fc.snapshot() == {}


def test_subtract_keeps_increments_made_after_the_mark():
    fc = FeedbackCounters()
    fc.increment("a", 5)
    mark = fc.snapshot()
    fc.increment("a", 2)   # dispatched while the refresh was fetching
    fc.increment("b")
    fc.subtract(mark)
    assert fc.snapshot() == {"a": 2, "b": 1}


def test_no_lost_increments_under_concurrent_threads():
    fc = FeedbackCounters()
    n_threads, per_thread = 8, 5000
    keys = ["ce1", "ce2", "ce3"]
    returned: list[list[int]] = [[] for _ in range(n_threads)]
    barrier = threading.Barrier(n_threads)

    def work(i):
        barrier.wait()
        for k in range(per_thread):
            returned[i].append(fc.increment(keys[k % 3]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = n_threads * per_thread
    assert sum(fc.get(k) for k in keys) == total
    # every returned value is unique per key: no two increments saw the same count
    seen = {k: set() for k in keys}
    for i in range(n_threads):
        for k, v in enumerate(returned[i]):
            key = keys[k % 3]
            assert v not in seen[key]
            seen[key].add(v)
    assert all(len(seen[k]) == fc.get(k) for k in keys)


def test_change_log_names_the_keys_changed_since_a_version():
    fc = FeedbackCounters()
    v0 = fc.version
    fc.increment("a")
    fc.increment("b", 2)
    assert fc.changed_since(v0) == ["a", "b"]
    v1 = fc.version
    assert fc.changed_since(v1) == []
    assert fc.counts(["b", "a", "c"]) == [2, 1, 0]
    fc.subtract({"a": 1})  # a refresh: any key may have changed
    assert fc.changed_since(v1) is None and fc.changed_since(fc.version) == []
    v2 = fc.version
    for i in range(FeedbackCounters.LOG_LIMIT + 1):
        fc.increment(f"ce{i % 7}")
    assert fc.changed_since(v2) is None  # the log restarted: re-read everything
