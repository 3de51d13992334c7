# Imported here so that @shared_task binds to this app whenever Django starts, in web and worker alike.
from config.celery import app as celery_app

__all__ = ["celery_app"]
