"""The background worker: refinement back-fill, rematerialization and periodic snapshots run
here, off the insertion path, when an index is opened with ``background=True``. With
``enabled=False`` (the index's default) each job runs inline on the thread that submits it
(docs/architecture.md, "Where background work runs")."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

Job = Callable[[], object]  # its result is discarded


class Worker:
    """One daemon thread draining a job queue; ``drain()`` waits until every job has run."""

    def __init__(self, enabled: bool = True, name: str = "sarp-background"):
        self.enabled = enabled
        self._q: queue.Queue[Job | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = None
        if enabled:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue ``job`` for the thread, or run it now when disabled; its errors surface at
        ``drain()`` or ``close()`` (inline: raised here)."""
        if self._thread is None:
            job()
        else:
            self._q.put(job)

    def drain(self) -> None:
        """Block until the queue is empty; re-raise the first error a job raised."""
        if self._thread is not None:
            self._q.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def close(self) -> None:
        """Run what is queued, also the jobs those jobs queue, then stop the thread."""
        if self._thread is not None:
            self._q.join()  # before the stop marker: a running job may still queue more
            self._q.put(None)
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _run(self) -> None:
        while True:
            job = self._q.get()
            try:
                if job is None:
                    return
                job()
            except BaseException as exc:  # kept and re-raised by drain()/close()
                if self._error is None:
                    self._error = exc
            finally:
                self._q.task_done()
