"""Line parsers: one per source family (NCCL, torch/python), each ``feed(line) -> list[Event] | None``."""
