"""Is an input a text log? A cheap look at its first bytes: ELF/core files, random bytes, UTF-16."""
from __future__ import annotations

#: Share of control bytes / invalid UTF-8 in the first bytes above which a file is taken for binary.
BINARY_SHARE = 0.30
SNIFF_BYTES = 8192
_BINARY_BYTES = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13, 27)) + b"\x7f"


ELF_MAGIC = b"\x7fELF"
ELF_WHY = "binary file (ELF executable or core dump), not a log"


def sniff_binary(head: bytes) -> str | None:
    """Why ``head`` (the first bytes of an input) is not a text log, or None when it looks like text.

    A log with a few NULs, ANSI codes or mangled UTF-8 stays text; an ELF/core file, an archive, random
    bytes or UTF-16 do not (UTF-16 gets a hint how to convert it).
    """
    sample = head[:SNIFF_BYTES]
    if not sample:
        return None
    if sample[:4] == ELF_MAGIC:
        return ELF_WHY
    if sample[:2] in (b"\xff\xfe", b"\xfe\xff") or _utf16_without_bom(sample):
        return "UTF-16 text, not UTF-8 (convert it: iconv -f UTF-16 -t UTF-8 FILE > FILE.txt)"
    # NULs alone are not binary: logrotate's copytruncate leaves a writer's old offset as a hole of NULs.
    sample = sample.replace(b"\x00", b"")
    if not sample:
        return None
    bad = len(sample) - len(sample.translate(None, _BINARY_BYTES))
    text = sample.decode("utf-8", "replace")
    bad += text.count("\ufffd")
    if bad > BINARY_SHARE * len(text):
        return f"binary data, not a log ({100 * bad // max(len(text), 1)}% control bytes or invalid UTF-8)"
    return None


def _utf16_without_bom(sample: bytes) -> bool:
    # ASCII text in UTF-16: every other byte is NUL, the others are not (a hole of NULs has NULs in both).
    if len(sample) < 64:
        return False
    half = len(sample) // 2
    return sample[1::2].count(0) > half * 4 // 5 and sample[0::2].count(0) < half // 10 or \
        sample[0::2].count(0) > half * 4 // 5 and sample[1::2].count(0) < half // 10
