"""Inputs: files, dirs, globs, .gz, stdin; dirty bytes; wrapper prefixes."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from nccl_analyzer.errors import InputError
from nccl_analyzer.sources import MAX_LINE, Source, clean_line, expand_inputs, iter_source

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "h200-nccl-2.28.9"
NCCL_LINE = b"vm:588:588 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>"


def _clean(b: bytes, src: Source | None = None):
    return clean_line(b, src or Source(path="t.log", real=None), 1)


def test_crlf_ansi_nul_and_bad_utf8_are_cleaned():
    line = _clean(b"\x1b[31mvm:588:588 [0] NCCL\x00 INFO caf\xe9 ok\x1b[0m\r\n")
    assert line.text == "vm:588:588 [0] NCCL INFO caf\ufffd ok"
    assert line.raw == line.text


@pytest.mark.parametrize("coloured", [
    b"\x1b[1;31mvm:588:588 [0] NCCL INFO caf ok\x1b[0m",            # bold red (rich, glog colour): parameters
    b"\x1b[38;5;196mvm:588:588 [0] NCCL INFO caf ok\x1b[39m",       # 256-colour
    b"\x1b[38;2;255;0;0mvm:588:588 [0] NCCL INFO caf ok\x1b[m",     # true colour, bare reset
    b"\x1b[32mvm:588:588\x1b[0m [0] NCCL INFO caf ok\x1b[K",        # erase to end of line
    b"\x1b[2K\x1b[1Gvm:588:588 [0] NCCL INFO caf ok",               # erase line, cursor to column 1
    b"\x1b[?25lvm:588:588 [0] NCCL INFO caf ok\x1b[?25h",           # private mode (hide/show cursor)
    b"\x1b]8;;http://x/\x07vm:588:588 [0] NCCL INFO caf ok\x1b]8;;\x1b\\",  # OSC 8 hyperlink, BEL / ST ends
    b"\x1b(Bvm:588:588 [0] NCCL INFO caf ok\x1bM",                  # charset designation, reverse index
], ids=["sgr_params", "sgr_256", "sgr_rgb", "erase_eol", "erase_line", "private_mode", "osc8", "esc_fe"])
def test_ansi_escapes_are_removed(coloured):
    line = _clean(coloured + b"\n")
    assert line.text == line.raw == "vm:588:588 [0] NCCL INFO caf ok", repr(line.raw)


def test_coloured_log_gives_the_same_verdict():
    from nccl_analyzer.analysis import analyze_text

    plain = (FIX / "04_duplicate_gpu" / "log.txt").read_text()
    red = "\n".join(f"\x1b[1;31m{s}\x1b[0m" if "WARN" in s else s for s in plain.splitlines()) + "\n"
    a, b = analyze_text(plain), analyze_text(red)
    assert a.root_cause.id == b.root_cause.id == "duplicate_gpu"
    assert [e.text for e in a.root_cause.evidence] == [e.text for e in b.root_cause.evidence]


def test_carriage_return_progress_bar_keeps_last_segment():
    assert _clean(b"epoch 1  10%\repoch 1  50%\repoch 1 100%\n").text == "epoch 1 100%"


@pytest.mark.parametrize(
    ("raw", "text", "rank", "local_rank", "time"),
    [
        (b"[rank3]:[E1129 13:53:17.751 ProcessGroupNCCL.cpp:1]", "[E1129 13:53:17.751 ProcessGroupNCCL.cpp:1]", 3,
         None, None),
        (b"[rank0]:   File \"/app/train.py\", line 3, in <module>", "  File \"/app/train.py\", line 3, in <module>",
         0, None, None),
        (b"[default5]:" + NCCL_LINE, NCCL_LINE.decode(), None, 5, None),
        (b"[trainer1]:[rank9]: Traceback (most recent call last):", "Traceback (most recent call last):", 9, 1, None),
        (b" 3: " + NCCL_LINE, NCCL_LINE.decode(), 3, None, None),
        (b"12: Traceback (most recent call last):", "Traceback (most recent call last):", 12, None, None),
        (b"2026-11-29T13:53:17.123456789Z " + NCCL_LINE, NCCL_LINE.decode(), None, None,
         "2026-11-29T13:53:17.123456789Z"),
        (b"2026-11-29T13:53:17.1Z [default1]:[rank1]: RuntimeError: boom", "RuntimeError: boom", 1, 1,
         "2026-11-29T13:53:17.1Z"),
        # Ray's log monitor (old and new forms) and vLLM's per-line logger head behind it (ray#44533)
        (b"(pid=909608) " + NCCL_LINE, NCCL_LINE.decode(), None, None, None),
        (b"(WorkerDict pid=7708, ip=172.16.182.219) " + NCCL_LINE, NCCL_LINE.decode(), None, None, None),
        (b"(RayWorkerVllm pid=7602) ERROR 04-07 00:57:46 ray_utils.py:45] Last error:", "Last error:", None, None,
         None),
        (b"(RayWorkerWrapper pid=335, ip=10.1.0.67) ERROR 01-29 07:44:33 [worker_base.py:467] Traceback (most "
         b"recent call last):", "Traceback (most recent call last):", None, None, None),
        (b"(raylet) A worker died or was killed", "A worker died or was killed", None, None, None),
        (b"INFO 01-29 07:44:27 pynccl.py:69] vLLM is using nccl==2.21.5", "vLLM is using nccl==2.21.5", None, None,
         None),
        # mpirun --tag-output: [jobid,rank]<stream>: keeps the rank (horovod#3871)
        (b"[1,3]<stderr>:" + NCCL_LINE, NCCL_LINE.decode(), 3, None, None),
        (b"[1,0]<stdout>:Traceback (most recent call last):", "Traceback (most recent call last):", 0, None, None),
        # a launcher's process tag in front of an srun label
        (b"[80746] 0: [rank0]:[E321 02:07:08.408 ProcessGroupNCCL.cpp:607] x",
         "[E321 02:07:08.408 ProcessGroupNCCL.cpp:607] x", 0, None, None),
        # srun label in front of an NCCL prefix whose host was cut (nccl#653)
        (b"201: :41367:41367 [1] enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available",
         ":41367:41367 [1] enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available", 201, None, None),
        # a tqdm bar left without its newline, the next record glued on (simple_GRPO#46), also behind --tee
        (b"1021/100000 [45:39<51:20:53,  1.87s/it][rank2]:[E723 01:58:45.510 ProcessGroupNCCL.cpp:632] x",
         "[E723 01:58:45.510 ProcessGroupNCCL.cpp:632] x", 2, None, None),
        (b"[default1]: 3%| | 270/9847 [05:50<3:17:42,  1.24s/it][rank1]:[E723 01:58:45.510 ProcessGroupNCCL.cpp:632] x",
         "[E723 01:58:45.510 ProcessGroupNCCL.cpp:632] x", 1, 1, None),
        # a log collector's wall clock in front of the job's own prefix (ms-swift#7992)
        (b"18:11:06.680 [rank4]:[E205 18:11:06.375 ProcessGroupNCCL.cpp:1870] x",
         "[E205 18:11:06.375 ProcessGroupNCCL.cpp:1870] x", 4, None, None),
        # a date-time with a space (Python logging's asctime, ts(1)), alone, behind srun / kubectl, with a logger head
        (b"2024-11-20 14:37:16 [rank3]: torch.OutOfMemoryError: CUDA out of memory.",
         "torch.OutOfMemoryError: CUDA out of memory.", 3, None, "2024-11-20 14:37:16"),
        (b" 2: 2024-11-20 14:37:16,123 [rank2]: RuntimeError: boom", "RuntimeError: boom", 2, None,
         "2024-11-20 14:37:16,123"),
        (b"2026-11-29T13:53:17.1Z 2024-11-20 14:37:16 [rank1]: RuntimeError: boom", "RuntimeError: boom", 1, None,
         "2026-11-29T13:53:17.1Z"),
        (b"2024-11-20 14:37:17.456 | ERROR    | train:main:52 - RuntimeError: boom", "RuntimeError: boom", None, None,
         "2024-11-20 14:37:17.456"),
        (b"2024-11-20 14:37:17,456 - root - ERROR - RuntimeError: boom", "RuntimeError: boom", None, None,
         "2024-11-20 14:37:17,456"),
        # the device of a cut NCCL head stays for the parser ("[1] NCCL INFO ..."), a viewer's number does not
        (b"[1] NCCL INFO Channel 00 : 1[21000] -> 0[1000] via P2P/IPC",
         "[1] NCCL INFO Channel 00 : 1[21000] -> 0[1000] via P2P/IPC", None, None, None),
    ],
)
def test_wrapper_prefixes(raw, text, rank, local_rank, time):
    line = _clean(raw)
    assert (line.text, line.rank, line.local_rank, line.time) == (text, rank, local_rank, time)
    assert line.raw == raw.decode()


def test_srun_label_needs_a_log_record_behind_it():
    # "1: loss 0.25" is training output, not an srun label.
    line = _clean(b"1: loss 0.25")
    assert line.text == "1: loss 0.25" and line.rank is None


def test_nccl_timestamp_is_not_taken_for_a_prefix():
    raw = b"[2026-11-29 13:53:31] vm:589:589 [0] init.cc:904 NCCL WARN Duplicate GPU detected"
    assert _clean(raw).text == raw.decode()


def test_over_long_line_is_truncated_and_reading_goes_on(tmp_path):
    p = tmp_path / "long.log"
    p.write_bytes(b"x" * (MAX_LINE * 3 + 5) + b"\n" + NCCL_LINE + b"\n")
    lines = list(iter_source(expand_inputs([str(p)])[0]))
    assert len(lines) == 2
    assert lines[0].truncated and len(lines[0].text) <= MAX_LINE
    assert lines[1].text == NCCL_LINE.decode() and lines[1].lineno == 2


def test_truncated_gzip_keeps_what_was_readable(tmp_path):
    body = (NCCL_LINE + b"\n") * 5000
    blob = gzip.compress(body)
    p = tmp_path / "cut.log.gz"
    p.write_bytes(blob[: len(blob) // 2])
    src = expand_inputs([str(p)])[0]
    lines = list(iter_source(src))
    assert 0 < len(lines) < 5000
    assert all(line.text == NCCL_LINE.decode() for line in lines[:-1])
    assert any("truncated" in w for w in src.warnings)


def test_gzip_is_detected_by_magic_not_name(tmp_path):
    p = tmp_path / "rank0.txt"
    p.write_bytes(gzip.compress(NCCL_LINE + b"\n"))
    src = expand_inputs([str(p)])[0]
    assert [ln.text for ln in iter_source(src)] == [NCCL_LINE.decode()]
    assert src.rank == 0


def test_empty_input_is_a_warning_not_an_error(tmp_path):
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    src = expand_inputs([str(p)])[0]
    assert list(iter_source(src)) == []
    assert src.warnings == ["input is empty"]


def test_binary_junk_never_raises(tmp_path):
    p = tmp_path / "junk.bin.log"
    p.write_bytes(bytes(range(256)) * 64 + b"\n" + NCCL_LINE)
    lines = list(iter_source(expand_inputs([str(p)])[0]))
    assert lines[-1].text == NCCL_LINE.decode()


def test_torchrun_log_dir_tree_gives_local_ranks(tmp_path):
    for r in range(3):
        d = tmp_path / "attempt_0" / str(r)
        d.mkdir(parents=True)
        (d / "stderr.log").write_text(f"rank {r} err\n")
        (d / "stdout.log").write_text(f"rank {r} out\n")
    srcs = expand_inputs([str(tmp_path)])
    assert len(srcs) == 6
    assert sorted({s.local_rank for s in srcs}) == [0, 1, 2]
    line = next(iter_source(srcs[0]))
    assert line.local_rank == srcs[0].local_rank


def test_globs_dirs_and_duplicates(tmp_path):
    for name in ("nccl.vm.11.log", "nccl.vm.12.log", "label.json"):
        (tmp_path / name).write_text("x\n")
    assert len(expand_inputs([str(tmp_path / "nccl.*.log")])) == 2
    # a directory skips label.json; naming a file twice reads it once
    assert len(expand_inputs([str(tmp_path), str(tmp_path / "nccl.vm.11.log")])) == 2


@pytest.mark.parametrize("spec", ["/nonexistent/run.log", "/nonexistent/*.log"])
def test_missing_inputs_raise_input_error(spec):
    with pytest.raises(InputError):
        expand_inputs([spec])


def test_real_fixture_reads_every_line():
    src = expand_inputs([str(FIX / "11_mismatch_gloo" / "log.txt")])[0]
    lines = list(iter_source(src))
    assert len(lines) == 63
    ranked = [ln for ln in lines if ln.rank is not None]
    assert {ln.rank for ln in ranked} == {0, 1}
    assert ranked[0].text == "Traceback (most recent call last):"


@pytest.mark.parametrize("raw,text,rank,local_rank", [
    # a log viewer's line number in front of torch's [rankN]: prefix (LlamaFactory#7396)
    (b"[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x", "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] x", 0, None),
    # mpirun-style process tag before an NCCL line (nccl#302): dropped, not taken as a rank
    (b"[155] crow-19:5330:7970 [3] NCCL INFO Ring 00 : 5[3d000] -> 6[b2000] via P2P/IPC", "crow-19:5330:7970 [3] NCCL INFO Ring 00 : 5[3d000] -> 6[b2000] via P2P/IPC", None, None),
    # role tag with a replica index (nccl#1837)
    (b"[trainer0|0]:Last error:", "Last error:", None, 0),
    # a bare [N] in front of ordinary text stays
    (b"[3] include/shm.h:28 NCCL WARN x", "[3] include/shm.h:28 NCCL WARN x", None, None),
    (b"[155]", "[155]", None, None),
])
def test_numeric_tags_and_role_replicas(raw, text, rank, local_rank):
    line = _clean(raw)
    assert (line.text, line.rank, line.local_rank) == (text, rank, local_rank)


@pytest.mark.parametrize("raw", [
    b"(deit92) [yuxin.fang@gpu-dev006 deit]$ NCCL_DEBUG=INFO bash train.sh",  # a shell prompt, not Ray
    b"(1/4) loading shards",
    b" 3%| | 270/9847 [05:50<3:17:42,  1.24s/it]Invalidate trace cache @ step 1",  # a bar, no record behind it
    b"12:00:01 [notice] service started",  # a clock before text that is no job prefix stays as it was
    b"ERROR: something failed 04-07",  # a level word without vLLM's date head
    b"INFO-node3:77:77 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.3<0>",  # a hostname that starts with a level word
])
def test_lookalike_prefixes_are_kept(raw):
    line = _clean(raw)
    assert line.text == raw.decode() and line.rank is None
