"""A caught exception of the visdom plotting client (docs/classes-session9d.md): Visdom._send catches the requests
error of a POST to a visdom server that is not running, prints it with traceback.print_exc() and returns False, so
the traceback it prints starts at visdom/__init__.py _send and the program goes on. Also when that traceback is cut
after its frames (its exception line is one very long line), as long as its header is there: the header says the
first frame shown is the outermost one. Logs written for the test in the real formats."""
from __future__ import annotations

from nccl_analyzer.analysis import analyze_text

_SITE = "/home/u/miniconda3/envs/t/lib/python3.8/site-packages"

_FRAMES = (
    f'  File "{_SITE}/visdom/__init__.py", line 711, in _send\n'
    "    data=json.dumps(msg),\n"
    f'  File "{_SITE}/visdom/__init__.py", line 677, in _handle_post\n'
    "    r = self.session.post(url, data=data)\n"
    f'  File "{_SITE}/requests/sessions.py", line 578, in post\n'
    "    return self.request('POST', url, data=data, json=json, **kwargs)\n"
    f'  File "{_SITE}/requests/adapters.py", line 516, in send\n'
    "    raise ConnectionError(e, request=request)\n"
)
_EXC = ("requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=8097): Max retries exceeded "
        "with url: /events (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at "
        "0x7f2b1c0d4e50>: Failed to establish a new connection: [Errno 111] Connection refused'))\n")
_CUT = " object at 0x7f2b1c0d4e50>: Failed to establish a new connection: [Errno 111] Connection refused'))\n"
_TRAIN = "train [0: 0/9]  loss: 0.731\n"


def _root(log: str):
    d = analyze_text(log)
    return d.root_cause.id if d.root_cause else None


def test_visdom_send_cut_traceback_then_training_is_healthy():
    # the traceback cut after its frames (the stored line starts mid-way), one training line after it
    log = "Traceback (most recent call last):\n" + _FRAMES + _CUT + _TRAIN
    assert _root(log) is None


def test_visdom_send_whole_traceback_is_healthy():
    log = ("Exception in user code:\n" + "-" * 60 + "\nTraceback (most recent call last):\n" + _FRAMES + _EXC
           + _TRAIN)
    assert _root(log) is None


def test_visdom_error_that_escaped_to_the_program_top_stays_a_failure():
    # raise_exceptions=True: _send raises a new ConnectionError, which reaches the script's <module>
    log = ("Traceback (most recent call last):\n"
           '  File "train.py", line 88, in <module>\n'
           "    vis.line(X=x, Y=y, win='loss')\n"
           f'  File "{_SITE}/visdom/__init__.py", line 1531, in line\n'
           "    return self._send(data_to_send)\n" + _FRAMES + _CUT)
    assert _root(log) is not None


def test_headless_cut_traceback_at_visdom_send_stays_a_failure():
    # no header: the first frame shown need not be the outermost one, so nothing says _send printed it
    log = "some output\n" + _FRAMES + _CUT
    assert _root(log) is not None
