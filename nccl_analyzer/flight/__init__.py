"""PyTorch Flight Recorder dumps: find and read them safely (reader), align them across ranks (align), and turn
the result into events and a per-rank table for the job model (events)."""
