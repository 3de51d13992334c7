import os

from django.core.wsgi import get_wsgi_application

from console.startup import freeze_startup_objects, load_request_path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

application = get_wsgi_application()
load_request_path()
freeze_startup_objects()  # see console/startup.py
