"""The broker process: configuration in, every collaborator built and wired, the faces started, a clean stop."""
