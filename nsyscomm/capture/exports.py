"""The formats ``nsys export`` writes a report to, and the one used when none is asked for: the
launcher and the ``nsyscomm run`` command share them (Arrow is read directly, the shorter wait
after the job: docs/performance.md)."""

EXPORTS = ("arrow", "sqlite")
DEFAULT_EXPORT = "arrow"
