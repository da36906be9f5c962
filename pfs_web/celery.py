"""The one Celery app. Its configuration lives in Django settings under CELERY_*."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pfs_web.settings")

app = Celery("pfs_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
