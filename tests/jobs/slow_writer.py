"""Writes one line, waits until the file argv[1] exists (the test makes it once it has seen that line; at most
WAIT_CAP s), writes another: shows whether a pass-through is line-unbuffered, whatever the machine's speed."""
import os
import sys
import time

WAIT_CAP = 300.0  # a pass-through that holds the line back still ends (and fails its test) instead of hanging

go = sys.argv[1]
print("first line from the job", flush=True)
deadline = time.monotonic() + WAIT_CAP
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.02)
print("second line from the job", flush=True)
