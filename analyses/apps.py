from django.apps import AppConfig


class AnalysesConfig(AppConfig):
    name = "analyses"
    verbose_name = "Analyses"

    def ready(self) -> None:
        # Wiring from the top: adaptive runs follow the rounds they wait on, and the tasks are
        # registered under their names before a service sends one (pfs_base.task_queue).
        from analyses import tasks  # noqa: F401
        from analyses.adaptive.chain import on_round_finished
        from analyses.signals import round_finished

        round_finished.connect(on_round_finished, dispatch_uid="adaptive-runs-follow-their-rounds")
