"""Error texts x the forms people paste them in (issue 9 §1-§2): the generator behind tests/test_paste_forms.py and
benchmarks/paste_forms.py.

Texts come from data only: every WARN format of NCCL 2.3-2.30 (fixtures/reference/nccl_log_formats_history.jsonl,
instantiated like tests/test_classification.py), the examples of torch_distributed_formats.json, NCCL's result
codes and error strings (nccl_error_strings.json) as torch, CuPy and JAX print them, the CUDA error strings the
shipped rules name (in torch's and NCCL's wording), torchelastic's failure block, Python's built-in exception
types, the signals (``signal.strsignal``) as a shell, UCX and gdb report a crash, and nccl-tests' failure lines.
Each text has a canonical form (as the program prints it, behind its real prefix); a form rewrites it the way a
paste does. ``verdict`` reads a form through the real input layer (a file on disk, ``analyze``).
"""
from __future__ import annotations

import atexit
import builtins
import html
import json
import random
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "fixtures" / "reference"
_CONV = re.compile(r"%(?:[-+ #0]*)(?:\d+|\*)?(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?([diouxXfeEgGcspm%])")
_ARG = {"d": "3", "i": "3", "u": "3", "o": "3", "x": "1a2b", "X": "1A2B", "f": "1.5", "e": "1.5", "E": "1.5",
        "g": "1.5", "G": "1.5", "c": "x", "s": "eth0", "p": "0x7f3a2c000000", "m": "Connection refused", "%": "%"}
PREFIX = "host1:123:456 [0] "


def instantiate(fmt: str) -> str:
    """A plausible message for a printf format (as tests/test_classification.py does)."""
    return _CONV.sub(lambda m: _ARG[m[1]], fmt).replace("{name}", "open")


@dataclass(frozen=True, slots=True)
class Text:
    """One error text. ``lines``: its canonical form (behind its real prefix); ``bare``: alternatives without it
    (name -> lines); ``family``: where it comes from."""
    family: str
    name: str
    lines: tuple[str, ...]
    bare: tuple[tuple[str, tuple[str, ...]], ...] = ()


# -- texts --------------------------------------------------------------------------------------------------------
def nccl_warns() -> Iterator[Text]:
    seen = set()
    with open(REF / "nccl_log_formats_history.jsonl", encoding="utf-8") as fh:
        for row in map(json.loads, fh):
            if row.get("level") != "WARN":
                continue
            for f in row["files"]:
                file = f.removeprefix("src/")
                body = instantiate(row["fmt"]).rstrip("\n")
                if (file, body) in seen:
                    continue
                seen.add((file, body))
                # a fmt with an inner newline prints continuation lines with no prefix
                first, *rest = body.split("\n")
                where = f"{file}:42 NCCL WARN "
                yield Text("nccl_warn", f"{file}: {row['fmt'][:60]}", ("", PREFIX + where + first, *rest),
                           (("file", (where + first, *rest)), ("warn", ("NCCL WARN " + first, *rest))))


def _error_strings() -> dict:
    return json.loads((REF / "nccl_error_strings.json").read_text(encoding="utf-8"))


def nccl_results() -> Iterator[Text]:
    """Each ncclResult_t error and its ncclGetErrorString text, as torch's DistBackendError, torch's ncclXxxError
    detail line, CuPy's NcclError and JAX's XlaRuntimeError print them."""
    es = _error_strings()
    newest = es["ncclGetErrorString"]["by_version"][-1]["strings"]
    for r in es["ncclResult_t"]:
        name = r["name"]
        if name in ("ncclSuccess", "ncclNumResults", "ncclInProgress") or name not in newest:
            continue
        s = newest[name]
        dist = (f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                f"ProcessGroupNCCL.cpp:1970, {s}, NCCL version 2.21.5")
        tb = ("Traceback (most recent call last):", '  File "train.py", line 12, in <module>',
              "    dist.barrier()")
        yield Text("nccl_result", f"DistBackendError {name}", (*tb, dist), (("line", (dist,)),))
        detail = f"{name}: {s}"
        yield Text("nccl_result", f"detail {name}", ("[rank0]:" + dist.replace("torch.distributed.", ""),
                                                     "[rank0]:" + detail), (("line", (detail,)),))
        # CuPy: NCCL_ERROR_<UPPER>: <string>
        upper = "NCCL_ERROR_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name.removeprefix("nccl")).upper()
        cupy = f"cupy_backends.cuda.libs.nccl.NcclError: {upper}: {s}"
        yield Text("binding", f"cupy {name}", (*tb, cupy), (("line", (cupy,)),))


def _rule_cuda_errors() -> list[str]:
    """The CUDA runtime error strings the shipped rules name (the ``cuda_error`` groups)."""
    out: list[str] = []
    for p in sorted((ROOT / "rules").rglob("*.toml")):
        for m in re.finditer(r"\(\?P<cuda_error>([^()]*(?:\([^()]*\)[^()]*)*)\)", p.read_text(encoding="utf-8")):
            for alt in m[1].split("|"):
                if re.fullmatch(r"[a-z][a-zA-Z -]+", alt) and alt not in out:
                    out.append(alt)
    return out


def cuda_errors() -> Iterator[Text]:
    tb = ("Traceback (most recent call last):", '  File "train.py", line 30, in <module>',
          "    loss.backward()")
    for s in _rule_cuda_errors():
        line = f"RuntimeError: CUDA error: {s}"
        yield Text("cuda", f"torch {s}", (*tb, line, "CUDA kernel errors might be asynchronously reported at some "
                                          "other API call, so the stacktrace below might be incorrect."),
                   (("line", (line,)),))
        warn = f"enqueue.cc:42 NCCL WARN Cuda failure '{s}'"
        yield Text("cuda", f"nccl {s}", ("", PREFIX + warn), (("file", (warn,)),))


def torch_formats() -> Iterator[Text]:
    entries = json.loads((REF / "torch_distributed_formats.json").read_text(encoding="utf-8"))["entries"]
    for e in entries:
        lines = tuple(e["example"].split("\n"))
        bare = []
        head = re.match(r"(\[rank\d+\]:)?\[[EFW][\d :.]*\S*\.cpp:\d+\] ", lines[0])
        if head:  # the c10 logger's prefix dropped
            bare.append(("line", (lines[0][head.end():], *lines[1:])))
        yield Text("torch", e["id"], lines, tuple(bare))


def elastic_block() -> Iterator[Text]:
    """torchelastic's failure summary (torch/distributed/elastic/multiprocessing/errors), per exit: a status and
    each fatal signal by name."""
    codes = [("1", ""), *((f"-{int(s)}", f" ({s.name})") for s in (signal.SIGABRT, signal.SIGKILL, signal.SIGSEGV,
                                                                    signal.SIGBUS))]
    for code, sig in codes:
        block = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                 "=" * 60, "train.py FAILED", "-" * 60, "Failures:", "  <NO_OTHER_FAILURES>", "-" * 60,
                 "Root Cause (first observed failure):", "[0]:", "  time      : 2025-03-21_02:07:17",
                 "  host      : node1", "  rank      : 1 (local_rank: 1)", f"  exitcode  : {code} (pid: 80751){sig}",
                 "  error_file: <N/A>", "  traceback : To enable traceback see: "
                 "https://pytorch.org/docs/stable/elastic/errors.html", "=" * 60)
        agent = (f"E0321 02:07:17.456000 80740 torch/distributed/elastic/multiprocessing/api.py:869] failed "
                 f"(exitcode: {code}) local_rank: 1 (pid: 80751) of binary: /usr/bin/python3")
        yield Text("elastic", f"exitcode {code}", (agent, *block), (("block", block), ("agent", (agent,))))


def python_exceptions() -> Iterator[Text]:
    """Every built-in exception type raised at the top of a script (not warnings, not exits)."""
    for name in sorted(dir(builtins)):
        t = getattr(builtins, name)
        if not (isinstance(t, type) and issubclass(t, BaseException)) or issubclass(t, (Warning, SystemExit,
                                                                                       GeneratorExit)):
            continue
        if t in (BaseException, Exception, BaseExceptionGroup, ExceptionGroup, KeyboardInterrupt):
            continue
        last = f"{name}: the batch could not be loaded from shard 3"
        tb = ("Traceback (most recent call last):", '  File "/workspace/train.py", line 88, in <module>',
              "    main()", '  File "/workspace/train.py", line 61, in main', "    batch = next(it)", last)
        yield Text("python", name, tb, (("line", (last,)),))


def crashes() -> Iterator[Text]:
    """Native crash reports for each fatal signal: a shell's job report (bash prints strsignal, ``(core dumped)``),
    UCX's ``Caught signal`` with its backtrace, a gdb backtrace, libstdc++'s terminate, nccl-tests' failures."""
    for sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE, signal.SIGKILL):
        desc = signal.strsignal(sig)
        if sig != signal.SIGKILL:
            shell = f"{desc} (core dumped)"
            yield Text("crash", f"shell {sig.name}", ("step 10 loss 1.23", shell), (("line", (shell,)),))
            ucx = f"[node1:3311:0:3311] Caught signal {int(sig)} ({desc}: invalid permissions for mapped object)"
            bt = (ucx, "==== backtrace (tid:   3311) ====",
                  " 0  /usr/lib/x86_64-linux-gnu/libucs.so.0(ucs_handle_error+0x2dc) [0x7f60a0e0c2dc]",
                  " 1  /usr/lib/x86_64-linux-gnu/libucs.so.0(+0x2b0bc) [0x7f60a0e0c0bc]")
            yield Text("crash", f"ucx {sig.name}", bt, (("line", (ucx,)),))
            gdb = (f"Thread 1 \"python\" received signal {sig.name}, {desc}.",
                   "#0  0x00007ffff7a42e97 in ncclProxyProgress () from /usr/lib/libnccl.so.2",
                   "#1  0x00007ffff7a43e12 in start_thread () from /lib/x86_64-linux-gnu/libpthread.so.0")
            yield Text("crash", f"gdb {sig.name}", gdb)
        else:
            shell = f"/bin/bash: line 1: 81234 {desc}                  python train.py"
            yield Text("crash", f"shell {sig.name}", ("step 10 loss 1.23", shell), (("line", (desc,)),))
    term = ("terminate called after throwing an instance of 'std::runtime_error'", "  what():  something broke")
    yield Text("crash", "terminate", term)
    for s in _error_strings()["ncclGetErrorString"]["by_version"][-1]["strings"].values():
        if s == "no error" or "in progress" in s:
            continue
        t = (f"node1: Test NCCL failure common.cu:1030 '{s}'", " .. node1 pid 1234: Test failure common.cu:951")
        yield Text("nccl_tests", s, t, (("line", t[:1]),))


def all_texts() -> list[Text]:
    return [*nccl_warns(), *nccl_results(), *cuda_errors(), *torch_formats(), *elastic_block(),
            *python_exceptions(), *crashes()]


# -- forms --------------------------------------------------------------------------------------------------------
CHATTER_BEFORE = ("Hi, I am training a 7B model on 2 nodes with 8 GPUs each (torch 2.4, NCCL 2.21).",
                  "It runs for a few minutes and then stops. This is what I see:", "")
CHATTER_AFTER = ("", "Any idea what is wrong? Thanks!")


def _each(prefix: str) -> Callable[[list[str]], list[str]]:
    return lambda ls: [prefix + s if s else prefix.rstrip() for s in ls]


def _fence(ls: list[str]) -> list[str]:
    return ["```", *ls, "```"]


def _gutter(ls: list[str]) -> list[str]:
    return [f"{i:>4} | {s}".rstrip() for i, s in enumerate(ls, 1)]


def _wrap(width: int) -> Callable[[list[str]], list[str]]:
    def f(ls: list[str]) -> list[str]:  # a terminal cuts every line at its width, words or not
        return [s[i:i + width] for s in ls for i in range(0, max(len(s), 1), width)]
    return f


def _html(ls: list[str]) -> list[str]:
    return [html.escape(s, quote=True) for s in ls]


WRAPPERS: dict[str, Callable[[list[str]], list[str]]] = {
    "plain": lambda ls: list(ls),
    "rank3": _each("[rank3]:"),
    "default0": _each("[default0]:"),
    "ray": _each("(RayWorker pid=123) "),
    "quote": _each("> "),
    "quote2": _each("> > "),
    "indent2": _each("  "),
    "indent4": _each("    "),
    "tab": _each("\t"),
    "fence": _fence,
    "html": _html,
    "gutter": _gutter,
    "wrap80": _wrap(80),
    "wrap120": _wrap(120),
}
#: ``crlf`` is applied when writing; ``prose`` puts the text's main line in a sentence.
FORMS = (*WRAPPERS, "crlf", "prose")
CONTEXTS = ("alone", "chatter")


def main_line(lines: tuple[str, ...]) -> str:
    """The line a person would quote: the last non-empty line of a traceback, else the first non-empty one."""
    ls = [s for s in lines if s.strip()]
    if ls and ls[0].startswith("Traceback"):
        return ls[-1]
    return ls[0] if ls else ""


# A log line's own head: what only a program writes in front of its message (NCCL's host:pid:tid [dev], a c10
# logger's "[E ... file.cpp:N]", glog's "E0321 02:07:17.456000 pid file.py:N]", torch's "[rankN]:" tag).
_LOG_HEAD = re.compile(r"[^\s:\[\]]+:\d+:\d+ \[\d+\] |(?:\[rank\d+\]:)?\[[IWEF][\d :.]*\S+\.(?:cpp|cc|h):\d+\] "
                       r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+\.py:\d+\] |\[rank\d+\]:")


def prose_counts(text: Text, base: str) -> bool:
    """Whether the sentence of the ``prose`` form quotes a whole log line (its line starts with a log head): that
    is evidence. A sentence that quotes only a message ("I get `NCCL WARN ...` when", "I get `KeyError: 6`") is
    prose, which must not become evidence on its own (issue 9 §2): either verdict, null or the canonical one, is
    accepted for it (``lenient``), never another id."""
    lines = text.lines if base == "canonical" else dict(text.bare)[base]
    return _LOG_HEAD.match(main_line(tuple(lines))) is not None


def needs_file(text: Text, base: str) -> bool:
    """A WARN pasted as ``NCCL WARN <text>`` whose text several NCCL source files print with different meanings
    ("Call to accept failed" in bootstrap.cc, net_ib.cc, net_socket.cc): without its ``file:line`` nothing says
    which one it is, so its canonical verdict cannot be kept (reported apart, not counted as a miss)."""
    if text.family != "nccl_warn" or base != "warn":
        return False
    from nccl_analyzer.messages import load_tables, warn_sources

    body = dict(text.bare)["warn"][0].removeprefix("NCCL WARN ")
    t = load_tables()
    return len({t.nccl_warn(f, body) for f in warn_sources(body)}) != 1


def lenient(text: Text, base: str, form: str) -> bool:
    """A cell that may be null as well as canonical: prose quoting no whole log line."""
    return form == "prose" and not prose_counts(text, base)


def render(text: Text, base: str, form: str, context: str) -> str:
    """The file content of ``text`` (its canonical lines, or its bare variant ``base``) in ``form``."""
    lines = list(text.lines) if base == "canonical" else list(dict(text.bare)[base])
    if form == "prose":
        lines = [f'I get "{main_line(tuple(lines))}" when I start the job on the second node.']
    elif form != "crlf":
        lines = WRAPPERS[form](lines)
    if context == "chatter":
        lines = [*CHATTER_BEFORE, *lines, *CHATTER_AFTER]
    eol = "\r\n" if form == "crlf" else "\n"
    return eol.join(lines) + eol


def cells(text: Text) -> list[tuple[str, str, str]]:
    """Every (base, form, context) of a text."""
    bases = ["canonical", *(b for b, _ in text.bare)]
    return [(b, f, c) for b in bases for f in FORMS for c in CONTEXTS if not (b == "canonical" and f == "plain"
                                                                              and c == "alone")]


def sample(texts: list[Text], per_text: int, seed: int) -> list[tuple[Text, tuple[str, str, str]]]:
    """``per_text`` cells of each text drawn with ``random.Random(seed)`` (all of them when it has fewer)."""
    rng = random.Random(seed)
    out = []
    for t in texts:
        cs = cells(t)
        out.extend((t, c) for c in (cs if len(cs) <= per_text else rng.sample(cs, per_text)))
    return out


def stratified(texts: list[Text], per_form: int, seed: int) -> list[tuple[Text, tuple[str, str, str]]]:
    """For each family and each form, ``per_form`` (text, base, context) drawn with ``random.Random(seed)``: every
    form of every family is tried, whatever the family's size."""
    rng = random.Random(seed)
    fams: dict[str, list[Text]] = {}
    for t in texts:
        fams.setdefault(t.family, []).append(t)
    out = []
    for fam in sorted(fams):
        for form in FORMS:
            for _ in range(per_form):
                t = rng.choice(fams[fam])
                base = rng.choice(["canonical", *(b for b, _ in t.bare)])
                ctx = rng.choice(CONTEXTS) if (base, form) != ("canonical", "plain") else "chatter"
                out.append((t, (base, form, ctx)))
    return out


# -- verdicts -----------------------------------------------------------------------------------------------------
_TMP: list[Path] = []


def verdict(content: str, rules=None) -> tuple[str | None, int]:
    """(root cause id, number of dismissed groups) of ``content`` read from a file, as a user's paste is."""
    from nccl_analyzer.analysis import analyze

    if not _TMP:
        _TMP.append(Path(tempfile.mkdtemp(prefix="paste_forms_")))
        atexit.register(shutil.rmtree, _TMP[0], True)
    p = _TMP[0] / "paste.log"
    p.write_bytes(content.encode("utf-8"))
    d = analyze([str(p)], rules=rules, workers=1)
    return (d.root_cause.id if d.root_cause else None), len(d.dismissed)


def outcome(canon: tuple[str | None, int], got: tuple[str | None, int], lenient: bool = False) -> str:
    """``held`` (the same root id; or null for a text whose canonical form is null: a harmless line dismissed
    there, not read at all here, is still no failure), ``no failure`` (null with nothing dismissed for a text that
    has a root cause), or ``changed`` (another id, a root cause for a harmless text, or null with a dismissal).
    ``lenient``: null is held too."""
    if canon[0] is not None:
        if got[0] == canon[0] or lenient and got[0] is None:
            return "held"
        return "no failure" if got[0] is None and not got[1] else "changed"
    return "held" if got[0] is None else "changed"


def error_level(canon: tuple[str | None, int]) -> bool:
    """A text whose canonical form has a root cause or a dismissed line: one the fail-safe accounts for."""
    return canon[0] is not None or canon[1] > 0


