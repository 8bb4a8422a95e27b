"""Results as people see them: terminal text, the HTML report and lesson, figures. Never calls the model."""
