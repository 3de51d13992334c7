import os

from django.core.wsgi import get_wsgi_application

from config.startup import freeze_startup_objects, load_request_path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()
load_request_path()
freeze_startup_objects()  # see config/startup.py
