"""The web app's endpoints by concern: the page and its files, the page's views, the jobs that
follow a computation, and generation. Each module's `router` is included by `studygroup.web.app`."""
