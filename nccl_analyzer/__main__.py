"""``python -m nccl_analyzer``."""
from .cli import main

main()
