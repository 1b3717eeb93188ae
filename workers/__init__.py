"""Job execution: the Celery app (distributed mode) and the in-process worker (embedded)."""
