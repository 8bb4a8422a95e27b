"""The local web app (`studygroup serve`): the FastAPI app, its guards, and the page's static files."""
