"""Entry point of the coordinator service container: `python services/coordinator/main.py`."""

from tidemark.services import run_service

if __name__ == "__main__":
    run_service("coordinator")
