"""Where the experts' fits run: in this process, in local worker processes, or on Dask.

Cross-fitting is ``K`` folds times ``M`` experts of independent fits, plus one refit per
expert; each is a pure function of its inputs (every estimator carries its own seed), so
the results are the same wherever they run. joblib schedules them: ``n_jobs`` local
processes (loky), or, with a scheduler address, joblib's Dask backend on a
``dask.distributed`` cluster for data that outgrows one machine (the ``dask`` extra).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

from training.errors import ParameterError

#: The environment variable that points the training at a Dask scheduler.
SCHEDULER_ENV = "IABMA_DASK_SCHEDULER"


def check_n_jobs(n_jobs: Any) -> int:
    """``n_jobs`` as joblib takes it: a positive count, or -1 for every core."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or not (n_jobs >= 1 or n_jobs == -1):
        raise ParameterError("n_jobs", n_jobs, "must be a positive integer or -1 (all cores)")
    return n_jobs


def scheduler_address(scheduler: str | None) -> str | None:
    """The explicit address, else ``$IABMA_DASK_SCHEDULER``, else None (no Dask)."""
    value = scheduler if scheduler is not None else os.environ.get(SCHEDULER_ENV) or None
    if value is not None and not str(value).strip():
        raise ParameterError("scheduler", value, "must be a Dask scheduler address")
    return value


@contextmanager
def _dask(address: str) -> Iterator[None]:
    try:
        import joblib
        from distributed import Client
    except ImportError:
        raise ParameterError(
            "scheduler",
            address,
            "needs dask.distributed; install the extra: pip install 'iabma[dask]'",
        ) from None
    try:
        client = Client(address, timeout="20s")
    except OSError as exc:
        raise ParameterError("scheduler", address, f"cannot be reached: {exc}") from None
    try:
        with joblib.parallel_config(backend="dask"):
            yield
    finally:
        client.close()


def run_all(
    fn: Callable[..., Any],
    jobs: Sequence[tuple[Any, ...]],
    n_jobs: int = 1,
    scheduler: str | None = None,
    progress: str | None = None,
) -> list[Any]:
    """``[fn(*args) for args in jobs]``, in order, run where the settings say.

    ``progress`` names a progress bar that counts the finished jobs (none if None).
    """
    address = scheduler_address(scheduler)
    n_jobs = check_n_jobs(n_jobs)
    bar = tqdm(total=len(jobs), desc=progress, disable=progress is None, leave=False)
    with bar:
        if address is None and n_jobs == 1:
            return [_counted(bar, fn(*args)) for args in jobs]
        from joblib import Parallel, delayed

        tasks = [delayed(fn)(*args) for args in jobs]
        if address is not None:
            with _dask(address):
                run = Parallel(n_jobs=-1 if n_jobs == 1 else n_jobs, return_as="generator")
                return [_counted(bar, out) for out in run(tasks)]
        run = Parallel(n_jobs=n_jobs, backend="loky", return_as="generator")
        return [_counted(bar, out) for out in run(tasks)]


def _counted(bar: tqdm, out: Any) -> Any:
    bar.update()
    return out
