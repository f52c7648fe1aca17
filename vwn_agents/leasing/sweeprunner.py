"""Running a sweep's simulations on Dask (``vgrid sweep``), resumably, into a ``SweepStore``.

``run_sweep(runs, store, scheduler=None, workers=None, retries=2, progress=None)``:

* the runs whose key has a ``done`` row in the store are skipped (resume; a re-run computes only
  what changed, since a changed input or option changes the key); duplicates are run once;
* the others are submitted to Dask: an existing scheduler (``scheduler="tcp://host:8786"``,
  started with ``dask scheduler``, workers with ``dask worker tcp://host:8786 --nthreads 1``
  in an environment where vgrid is installed), or a ``LocalCluster`` of ``workers`` processes of
  one thread each (default: every core, ``os.cpu_count()``);
* each result is stored as it completes (``SweepStore.put``), so a kill loses only the runs in
  flight;
* a run that raises, or whose worker dies (Dask's ``KilledWorker``), is submitted again up to
  ``retries`` more times; then it is stored as ``failed`` with its error and attempt count and
  listed in the summary -- never dropped.

``progress(done, total)`` is called after every stored run (``done`` counts runs finished now,
successful or failed). Returns the summary dict: ``planned``, ``present`` (done rows of these
runs), ``computed_now``, ``retried`` (resubmissions), ``failed`` ([{key, configuration, trace,
inject, seed, error, attempts}]), ``wall_s``, ``workers``, ``scheduler``.
"""
from __future__ import annotations

import logging
import os
import time

from .sweepspec import run_simulation
from .sweepstore import SweepStore


def run_on_worker(run) -> tuple[dict, str]:
    """The Dask task: simulate ``run``; returns (result, the worker's address)."""
    from distributed import get_worker
    try:
        address = get_worker().address
    except ValueError:          # not on a worker (a synchronous client): the local process
        address = f"pid:{os.getpid()}"
    return run_simulation(run), address


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:2000] + "..."


def _client(scheduler: str | None, workers: int | None):
    from distributed import Client, LocalCluster
    if scheduler:
        return Client(scheduler, timeout=30, set_as_default=False), None
    cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                           dashboard_address=":0", silence_logs=logging.ERROR, host="127.0.0.1")
    return Client(cluster, set_as_default=False), cluster


def run_sweep(runs: list, store: SweepStore, scheduler: str | None = None, workers: int | None = None,
              retries: int = 2, progress=None, max_runs: int | None = None) -> dict:
    """Compute the missing runs of ``runs`` on Dask into ``store``; see the module docstring.
    Raises OSError (``distributed``'s connection errors) when the scheduler cannot be reached."""
    wall0 = time.perf_counter()
    unique = {}
    for r in runs:
        unique.setdefault(r.key(), r)
    done = store.done_keys()
    todo = [(k, r) for k, r in unique.items() if k not in done]
    if max_runs is not None:
        todo = todo[:max_runs]
    summary = {"planned": len(unique), "computed_now": 0, "retried": 0, "failed": [],
               "scheduler": scheduler or "LocalCluster", "workers": 0}
    if progress:
        progress(0, len(todo))
    if todo:
        _execute(todo, store, scheduler, workers, retries, progress, summary)
    summary["present"] = len(store.done_keys() & set(unique))
    summary["missing"] = summary["planned"] - summary["present"]
    summary["wall_s"] = round(time.perf_counter() - wall0, 2)
    return summary


def _execute(todo, store, scheduler, workers, retries, progress, summary) -> None:
    from distributed import as_completed
    client, cluster = _client(scheduler, workers)
    try:
        summary["workers"] = len(client.scheduler_info().get("workers", {}))
        by_future, attempts, errors = {}, {}, {}
        futures = []
        for key, run in todo:
            fut = client.submit(run_on_worker, run, key=f"sim-{key}-1", pure=False)
            by_future[fut.key] = (key, run)
            attempts[key] = 1
            futures.append(fut)
        finished = 0
        pending = as_completed(futures, loop=client.loop)
        for fut in pending:
            key, run = by_future.pop(fut.key)
            try:
                result, worker = fut.result()
            except Exception as exc:  # noqa: BLE001 -- any failure of a run is stored, typed by name
                errors[key] = _error_text(exc)
                if attempts[key] <= retries:
                    attempts[key] += 1
                    summary["retried"] += 1
                    again = client.submit(run_on_worker, run, key=f"sim-{key}-{attempts[key]}", pure=False)
                    by_future[again.key] = (key, run)
                    pending.add(again)
                    continue
                store.put(run, "failed", error=errors[key], attempts=attempts[key], key=key)
                p = run.params()
                summary["failed"].append({"key": key, "configuration": p["configuration"], "trace": p["trace"],
                                          "inject": p["inject"], "seed": p["seed"], "error": errors[key],
                                          "attempts": attempts[key]})
            else:
                store.put(run, "done", result=result, attempts=attempts[key], worker=worker,
                          error=errors.get(key, ""), key=key)
                summary["computed_now"] += 1
            finished += 1
            if progress:
                progress(finished, len(todo))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
