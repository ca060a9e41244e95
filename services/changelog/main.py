"""Entry point of the changelog service container: `python services/changelog/main.py`."""

from tidemark.services import run_service

if __name__ == "__main__":
    run_service("changelog")
