"""The patterns of paste detection and normalisation, each compiled on first use (``_Rx``)."""
from __future__ import annotations

import re


class _Rx:
    """A regex compiled on first use: most runs read raw logs and never need most of these, and compiling them all
    at import would add to every run's start-up."""

    __slots__ = ("pattern", "flags", "_rx")

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern, self.flags, self._rx = pattern, flags, None

    def get(self) -> re.Pattern:
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(self.pattern, self.flags)
        return rx

    def match(self, *args):
        return self.get().match(*args)

    def fullmatch(self, *args):
        return self.get().fullmatch(*args)

    def search(self, *args):
        return self.get().search(*args)

    def finditer(self, *args):
        return self.get().finditer(*args)

    def sub(self, *args, **kwargs):
        return self.get().sub(*args, **kwargs)


_FENCE = _Rx(r"[ \t]*(?:`{3,}|~{3,})[ \t]*[\w+.#-]*[ \t]*$")
# HTML a Markdown renderer keeps: <details>, <summary>...</summary>, <pre>, <code>, <br>, <p>, <blockquote>.
_TAGS = r"</?(?:details|summary|pre|code|br|p|blockquote|div|span|tt|samp|kbd)\b[^<>]*>"
_LEAD_TAGS = _Rx(r"[ \t]*(?:(?:" + _TAGS + r")[ \t]*)+")
_SUMMARY = _Rx(r"[ \t]*(?:<details\b[^<>]*>[ \t]*)?<summary\b[^<>]*>.*?</summary>[ \t]*", re.I)
_TRAIL_TAGS = _Rx(r"(?:[ \t]*(?:" + _TAGS + r"))+[ \t]*$", re.I)
_QUOTE = _Rx(r"(?:[ \t]{0,3}>(?: |$|(?=>)))+")
# A gutter: "12 | text", "12| text", "  12: text", "12<TAB>text" (the number is checked to count up).
_GUTTER = _Rx(r"[ \t]*(\d{1,7})(?: ?\| ?|: |:$|\t| ?│ ?)")
# A log viewer's bracketed gutter: "[1744] text" (web log viewers, CI consoles). A rank label looks the same ("[3] NCCL
# INFO ..."), so it is taken only where the numbers count up line by line and no line behind one is an NCCL message.
_BRACKET_GUTTER = _Rx(r"\[(\d{1,7})\](?: |$)")
# A reader's note that the program hung, in marks of its own: "*hangs*", "<hangs here>", "(stuck here)", "<nothing,
# forever>". No program prints that; it is the paste's absence of output put in words, not output (a hang's
# "the program printed nothing after its stage lines" must still hold with it).
_HANG_NOTE = _Rx(r"[ \t]*[*_(<\[]+[ \t]*(?:(?:it|process|program|job|training|everything|then|and|still)[ \t]+)*"
                 r"(?:hangs?|hung|stuck|freezes|frozen|nothing(?:[ \t,]+(?:more|happens|forever))*|no (?:more )?output)"
                 r"(?:[ \t]+(?:here|forever|indefinitely|after this|at this point))?[ \t.!]*[*_)>\]]+[ \t]*$", re.I)
_ELISION = _Rx(
    r"[ \t]*(?:\[\s*(?:\.{3,}|…|snip(?:ped)?|truncated|omitted|cut|more|\.\.\. ?\d+ (?:more )?lines?[\w ]*)[^\]]{0,40}\]"
    r"|\.{3,}|…|<\s*(?:snip(?:ped)?|\.{3,}|…)\s*>|\(\s*(?:\.{3,}|…|snip(?:ped)?)\s*\)|--\s*snip\s*--"
    r"|\.{3,} ?\(?\d+ (?:more )?lines? (?:omitted|removed|skipped|truncated)\)?)[ \t]*$", re.I)
_AUTOLINK = _Rx(r"\[([^\[\]()\s]+)\]\((?:https?://)?([^()\s]+?)/?\)")
# A whole line that is a Markdown link's text ("[<log text>](https://...)", the target maybe cut off by the paste):
# a log pasted as a link's text (a search link made from the error) renders as that text.
_LINE_LINK = _Rx(r"\[(.+)\]\(https?://[^\s()]*\)?\s*$")

# What starts a log record (after the paste decorations are gone): a wrapped line's continuation never does.
_RECORD = _Rx(
    r"(?:\[[^\]]{1,40}\] ?)?[\w.-]+:\d+:\d+ (?:\[\d+\] )?|\[(?:rank|default|[A-Za-z_]+)\d+\]:|\[?\d{4}-\d\d-\d\d"
    r"|[IWEF]\d{4} \d\d:|Traceback \(most|  File \"|File \"[^\"]+\", line \d|frame #\d+:|terminate called |  what\(\): "
    r"|\[[IWEF] [\w.]+:\d+\] |[A-Za-z][\w.]*[\d-][\w.-]*: |Exception raised from |[A-Za-z_][\w.]*(?:Error|Exception|Warning|Interrupt|Exit)(?::|$)|NCCL (?:INFO|WARN|version)"
    r"|Last error:|nccl[A-Z]\w*: |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[: ]|\d\d:\d\d:\d\d|[\w./-]+\.(?:cc|cu|h|cpp|c|py):\d+ "
    r"|\s*\d{1,5}: |\*{3} |={3,}|-{3,}|\$ |\(\w+ pid=")
# Heads that never start indented in a real log: a stray indent in front of them is the paste's.
_FLUSH_HEADS = _Rx(
    r"[ \t]+(?=Last error:|Traceback \(most recent call last\):|NCCL (?:INFO|WARN) |\[rank\d+\]:|\[default\d+\]:"
    r"|terminate called |[\w.-]+:\d+:\d+ \[\d+\] NCCL |[IWEF]\d{4} \d\d:\d\d:\d\d"
    r"|[\w./-]+\.(?:cc|cu|h|hpp|cpp|c):\d+ (?:\([^()\s]*\) )?NCCL (?:INFO|WARN) )")
# A sentence that quotes a whole log line: a quote mark right before a head only a program writes (NCCL's
# "host:pid:tid [dev] ", a c10 logger's "[E... file.cpp:N] ", glog's "E0321 02:07:17.456000 pid file.py:N] ",
# torch's "[rankN]:"). Group 2: the quoted line, up to its closing mark (or the line's end): NCCL's parser would
# read a quoted NCCL line anyway (any text before the host is a timestamp to it), but with the sentence's tail in
# its message.
_LOG_HEAD = (r"(?:[^\s:\[\]\"'`]+:\d+:\d+ \[\d+\] |(?:\[rank\d+\]:)?\[[IWEF][\d :.]*\S+\.(?:cpp|cc|h):\d+\] "
             r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+\.py:\d+\] |\[rank\d+\]:)")
_PROSE_QUOTE = _Rx(r"[A-Za-z][^\"`\u201c]{0,80}?([\"`\u201c])(" + _LOG_HEAD + r".*?)(?:\1|\u201d|$)")
# The cheap first test on a sample: a quote mark right before such a head, anywhere.
_QUOTED_HEAD = _Rx(r"[\"`\u201c](?=" + _LOG_HEAD + ")")
_TRACE = _Rx(r"NCCL INFO \S+:\d+(?: \(\w+\))? -> \d")
_EXC = _Rx(r"[\w.]*(?:Error|Exception|Interrupt)(?::|$)")
_FRAME = _Rx(r"\s*File \"[^\"]*\", line \d+")
# ncclResult_t names as torch prints them before "Last error:" (the detail after it may start "ncclSocketInit: ").
_NCCL_RESULT = _Rx(r"nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage"
                          r"|RemoteError|InProgress|Timeout): ")
# An ISO date-time or a glog "I1201 13:53:17.123" head; compared as text (one paste uses one format).
_TIME = _Rx(r"(?:\d{4}-\d\d-\d\d[ T_]|(?<!\w)[IWEF]\d{4} )\d\d:\d\d:\d\d(?:[.,]\d+)?")
# Python's traceback header (a line of its own in a raw log).
_TB_HEADER = "Traceback (most recent call last):"
# A second record glued into a line: another rank's "[rankN]:" or another process's NCCL prefix.
_GLUED_RANK = _Rx(r"\[rank\d+\]:")
_TWO_NCCL = _Rx(r" NCCL (?:INFO|WARN) [^\n]* NCCL (?:INFO|WARN) ")
# Launcher prefixes outside the job's own text (sources.py strips them): kubectl time, srun label, torchrun tag.
_K8S_TIME = _Rx(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) ")
_LAUNCH = _Rx(r"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) )?(?: {0,4}\d{1,5}: )?"
                     r"(?:\[[A-Za-z_][\w-]*?\d+(?:\|\d+)?\]:)?(?:\[rank\d+\]: ?)?")
