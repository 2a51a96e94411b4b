"""Writes one line, waits, writes another: shows whether a pass-through is line-unbuffered."""
import sys
import time

pause = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
print("first line from the job", flush=True)
time.sleep(pause)
print("second line from the job", flush=True)
