"""Entry point of the checkpoint-store service container: `python services/checkpoint-store/main.py`."""

from tidemark.services import run_service

if __name__ == "__main__":
    run_service("checkpoint-store")
