from django.apps import AppConfig


class AggregationConfig(AppConfig):
    name = "aggregation"
    verbose_name = "Aggregation servers"

    def ready(self) -> None:
        # Registers the tasks under their names: services send them by name (pfs_base.task_queue).
        from aggregation import tasks  # noqa: F401
