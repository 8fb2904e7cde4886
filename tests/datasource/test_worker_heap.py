"""datasource/worker_heap.py in Spark's own Python workers: a reused worker freezes its heap at
the start of its second call of this source, and never in a process that is not one of Spark's
reused workers (this test process)."""

from __future__ import annotations

import gc


def _probe(tasks):
    import os

    from datasource import worker_heap

    for _ in tasks:
        worker_heap.call_started()
        yield os.getpid(), worker_heap._calls, gc.get_freeze_count()


def test_a_reused_worker_freezes_its_heap_from_its_second_task_on(spark) -> None:
    seen = spark.sparkContext.parallelize(range(12), 12).mapPartitions(_probe).collect()
    assert len(seen) == 12
    # tasks counted per process: frozen exactly from the second on
    assert all((frozen > 0) == (tasks >= 2) for _, tasks, frozen in seen), seen
    assert max(tasks for _, tasks, _ in seen) >= 2, f"no worker was reused: {seen}"


def test_outside_spark_s_workers_nothing_is_frozen() -> None:
    from datasource import worker_heap

    before, count = worker_heap._calls, gc.get_freeze_count()
    for _ in range(3):
        worker_heap.call_started()
    assert (worker_heap._calls, gc.get_freeze_count()) == (before, count)
