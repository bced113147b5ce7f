"""Project tools run from the repository root (`python -m tools.<name>`); not part of the wheel."""
