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
        # srun's label, then a collector's clock, then torch's prefix
        (b"3: 18:11:06.680 [rank4]:[E205 18:11:06.375 ProcessGroupNCCL.cpp:1870] x",
         "[E205 18:11:06.375 ProcessGroupNCCL.cpp:1870] x", 4, None, None),
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
        # torchrun's role prefix, then the job's own clock, then torch's rank prefix
        (b"[default0]:18:11:06.680 [rank4]:[E205 18:11:06.375 ProcessGroupNCCL.cpp:1870] x",
         "[E205 18:11:06.375 ProcessGroupNCCL.cpp:1870] x", 4, 0, None),
        # kubectl logs --timestamps: a blank line and a short one keep their timestamp and text
        (b"2026-11-29T13:53:17.123456789Z ", "", None, None, "2026-11-29T13:53:17.123456789Z"),
        (b"2026-11-29T13:53:17.123456789Z ok", "ok", None, None, "2026-11-29T13:53:17.123456789Z"),
        # the last line of a killed process, cut inside torch's rank prefix: no rank read from half a prefix
        (b"[rank12", "[rank12", None, None, None),
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


# -- inputs the API and the CLI accept, and what they say when there is nothing to read -------------------------
def test_as_specs_takes_paths_and_lists_of_them(tmp_path):
    from nccl_analyzer.sources import as_specs

    assert as_specs("run.log") == ["run.log"]
    assert as_specs(tmp_path / "a.log") == [str(tmp_path / "a.log")]
    assert as_specs(["a.log", tmp_path / "b.log", "-"]) == ["a.log", str(tmp_path / "b.log"), "-"]
    assert as_specs(p for p in ("x", "y")) == ["x", "y"]
    with pytest.raises(TypeError, match="not bytes"):
        as_specs(b"run.log")
    with pytest.raises(TypeError, match="got int"):
        as_specs(3)
    with pytest.raises(TypeError, match="got bytes: b'x'"):
        as_specs(["a.log", b"x"])


def test_stdin_is_a_source_named_as_asked(tmp_path):
    srcs = expand_inputs(["-"], stdin_name="job.log")
    assert [(s.path, s.real) for s in srcs] == [("job.log", None)]
    p = tmp_path / "b.log"
    p.write_text("x\n")
    assert [s.path for s in expand_inputs(["-", str(p)])] == ["-", str(p)]


def test_directory_skips_what_is_not_a_log_and_keeps_sorted_order(tmp_path):
    skipped = ("x.json", "x.html", "x.xml", "x.png", "x.jpg", "dump.PKL", "model.pt", "lib.so", "logs.zip",
               "logs.tar", "logs.TGZ")
    for name in ("b.log", "a.txt", ".hidden.log", "label.json", "sub/c.out") + skipped:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x\n")
    srcs = expand_inputs([str(tmp_path)])
    assert [Path(s.path).relative_to(tmp_path).as_posix() for s in srcs] == ["a.txt", "b.log", "sub/c.out"]


def test_directory_without_logs_and_glob_without_files_are_input_errors(tmp_path):
    (tmp_path / "label.json").write_text("{}")
    (tmp_path / "d.log").mkdir()  # a folder whose name looks like a log
    for spec, msg in ((str(tmp_path / "d.log"), "nothing to analyze: the directory holds no log-like file"),
                      (str(tmp_path / "*.log"), "no file matches this pattern"),
                      ("/dev/null", "not a regular file or directory"),
                      (str(tmp_path / "gone.log"), "no such file or directory")):
        with pytest.raises(InputError) as ei:
            expand_inputs([spec])
        assert str(ei.value) == f"{spec}: {msg}"  # the one line the CLI prints names the input


def test_glob_sorted_and_one_file_named_twice_read_once(tmp_path):
    for name in ("n2.log", "n1.log", "n10.log"):
        (tmp_path / name).write_text("x\n")
    srcs = expand_inputs([str(tmp_path / "n*.log"), str(tmp_path / "n1.log")])
    assert [Path(s.path).name for s in srcs] == ["n1.log", "n10.log", "n2.log"]


@pytest.mark.parametrize(("rel", "rank", "local_rank"), [
    ("rank3.log", 3, None),
    ("train.rank-12.txt", 12, None),
    ("rank_0", 0, None),
    ("ranking.log", None, None),
    ("node1/worker7.log", None, None),
    ("logs/attempt_0/2/stderr.log", None, 2),
    ("logs/attempt_1/11/stdout.log", None, 11),
])
def test_rank_from_file_name_and_torchrun_log_dir(tmp_path, rel, rank, local_rank):
    p = tmp_path / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("x\n")
    src = expand_inputs([str(p)])[0]
    assert (src.rank, src.local_rank) == (rank, local_rank)
    assert next(iter_source(src)).rank == rank


def _read(p: Path):
    from nccl_analyzer.sources import sniff_source

    src = expand_inputs([str(p)])[0]
    sniff_source(src)
    lines = [] if src.skipped else list(iter_source(src))
    return src, lines


def test_elf_file_is_skipped_with_a_warning_and_nothing_read(tmp_path):
    from nccl_analyzer.binary import ELF_WHY
    from nccl_analyzer.sources import nothing_to_analyze

    p = tmp_path / "core.log"
    p.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(200) + b"\nNCCL WARN x\n")
    src, lines = _read(p)
    assert src.skipped == src.binary == ELF_WHY
    assert src.warnings == [f"skipped: {ELF_WHY}"] and not src.analyzable
    assert nothing_to_analyze([src]) == f"nothing to analyze: {p}: {ELF_WHY}"
    # reading it anyway gives nothing and no second warning
    assert list(iter_source(src)) == [] and src.warnings == [f"skipped: {ELF_WHY}"]
    # read without sniffing first (standard input): the reader sees the ELF head itself and yields nothing
    src2 = Source(path="-", real=str(p))
    assert list(iter_source(src2)) == [] and src2.skipped == ELF_WHY
    assert src2.warnings == [f"skipped: {ELF_WHY}"]


def test_binary_start_is_read_and_the_warning_says_what_came_of_it(tmp_path):
    p = tmp_path / "junk.log"
    p.write_bytes(bytes(range(1, 9)) * 2000 + b"\n" + NCCL_LINE + b"\n")
    src, lines = _read(p)
    assert src.binary is not None and src.binary.startswith("binary data, not a log (")
    assert src.skipped is None and lines[-1].text == NCCL_LINE.decode()
    assert not src.analyzable  # no events counted yet
    src.finish_binary()
    assert src.warnings == [f"skipped: {src.binary}"]
    src.events = 4
    src.warnings.clear()
    src.finish_binary()
    src.finish_binary()
    assert src.warnings == [f"starts like binary data ({src.binary}); analyzed the 4 event(s) found in its text"]
    assert src.analyzable


def test_text_source_is_not_binary_and_finish_binary_says_nothing(tmp_path):
    p = tmp_path / "ok.log"
    p.write_bytes(NCCL_LINE + b"\n")
    src, lines = _read(p)
    assert src.binary is None and len(lines) == 1 and src.analyzable
    src.finish_binary()
    assert src.warnings == []


def test_nothing_to_analyze_names_three_sources_and_counts_the_rest(tmp_path):
    from nccl_analyzer.sources import nothing_to_analyze

    srcs = []
    for i in range(5):
        p = tmp_path / f"e{i}.log"
        p.write_bytes(b"")
        src = expand_inputs([str(p)])[0]
        list(iter_source(src))
        srcs.append(src)
    assert nothing_to_analyze(srcs) == ("nothing to analyze: " + "; ".join(f"{s.path}: input is empty"
                                                                           for s in srcs[:3]) + " (+2 more)")
    assert nothing_to_analyze(srcs[:3]).endswith("e2.log: input is empty")
    full = tmp_path / "full.log"
    full.write_bytes(NCCL_LINE + b"\n")
    src = expand_inputs([str(full)])[0]
    list(iter_source(src))
    assert nothing_to_analyze(srcs + [src]) is None


def test_cut_lines_are_counted_in_one_warning(tmp_path):
    p = tmp_path / "long.log"
    p.write_bytes(NCCL_LINE + b"\n" + (b"y" * (MAX_LINE + 1) + b"\n") * 2 + NCCL_LINE + b"\n")
    src = expand_inputs([str(p)])[0]
    lines = list(iter_source(src))
    assert [(ln.lineno, ln.truncated, len(ln.text)) for ln in lines] == [
        (1, False, len(NCCL_LINE)), (2, True, MAX_LINE), (3, True, MAX_LINE), (4, False, len(NCCL_LINE))]
    assert src.warnings == [f"2 line(s) longer than 64 KiB cut to 64 KiB (first: {p}:2); the rest of each was not "
                            "analyzed"]
    src.finish_warnings()
    assert len(src.warnings) == 1


def test_line_longer_than_a_read_block_and_last_line_without_newline(tmp_path):
    from nccl_analyzer.sources import BLOCK

    p = tmp_path / "huge.log"
    p.write_bytes(NCCL_LINE + b"\n" + b"z" * (BLOCK * 2 + 7) + b"\n" + NCCL_LINE + b"\nlast words")
    src = expand_inputs([str(p)])[0]
    lines = list(iter_source(src))
    assert [(ln.lineno, ln.text[:12], ln.truncated) for ln in lines] == [
        (1, NCCL_LINE.decode()[:12], False), (2, "z" * 12, True), (3, NCCL_LINE.decode()[:12], False),
        (4, "last words", False)]
    assert len(lines[1].text) == MAX_LINE and src.lines == 4
    assert "(first: " + str(p) + ":2)" in src.warnings[0]


def test_many_blocks_keep_every_line_and_multibyte_text_whole(tmp_path):
    body = "".join(f"{i} caf\u00e9 \u4e2d\u6587 vm:1:1 [0] NCCL INFO line {i}\n" for i in range(60000))
    p = tmp_path / "big.log"
    p.write_text(body, encoding="utf-8")
    assert p.stat().st_size > 2 * (1 << 20)
    lines = list(iter_source(expand_inputs([str(p)])[0]))
    assert [ln.text for ln in lines] == body.splitlines()
    assert [ln.lineno for ln in lines[-2:]] == [59999, 60000]


def test_gzip_across_blocks_reads_every_line(tmp_path):
    body = b"".join(NCCL_LINE + b" %d\n" % i for i in range(40000))
    p = tmp_path / "big.log.gz"
    p.write_bytes(gzip.compress(body))
    src = expand_inputs([str(p)])[0]
    lines = list(iter_source(src))
    assert [ln.text.encode() for ln in lines] == body.splitlines() and src.warnings == []


def test_gzip_with_a_bad_checksum_warns_and_keeps_its_lines(tmp_path):
    blob = bytearray(gzip.compress((NCCL_LINE + b"\n") * 20000))
    blob[-8] ^= 0xFF  # the CRC32 in the trailer: every line decompresses, the check at the end fails
    p = tmp_path / "bad.log.gz"
    p.write_bytes(bytes(blob))
    src = expand_inputs([str(p)])[0]
    lines = list(iter_source(src))
    assert 0 < len(lines) <= 20000 and all(ln.text == NCCL_LINE.decode() for ln in lines)
    assert len(src.warnings) == 1 and src.warnings[0].startswith("input ends early (truncated or corrupt gzip")


def test_raw_reader_for_the_live_pipe_cuts_long_lines(tmp_path):
    import io

    from nccl_analyzer.sources import read_raw_lines

    src = Source(path="pipe", real=None)
    data = NCCL_LINE + b"\n" + b"q" * (MAX_LINE * 2 + 3) + b"\n" + NCCL_LINE
    raws = list(read_raw_lines(io.BytesIO(data), src))
    lines = [clean_line(b, src, i) for i, b in enumerate(raws, 1)]
    assert [(ln.text[:4], ln.truncated) for ln in lines] == [("vm:5", False), ("qqqq", True), ("vm:5", False)]
    assert len(lines[1].text) == MAX_LINE and lines[2].text == NCCL_LINE.decode()
    assert (src.cut_lines, src.first_cut) == (1, 2)


def test_raw_reader_reports_a_corrupt_gzip(tmp_path):
    from nccl_analyzer.sources import open_binary, read_raw_lines

    blob = gzip.compress((NCCL_LINE + b"\n") * 20000)
    p = tmp_path / "cut.gz"
    p.write_bytes(blob[: len(blob) // 2])
    src = Source(path=str(p), real=str(p))
    with open_binary(src) as fh:
        raws = list(read_raw_lines(fh, src))
    assert 0 < len(raws) < 20000
    assert src.warnings and src.warnings[0].startswith("input ends early")


def test_unreadable_file_is_an_input_error(tmp_path):
    from nccl_analyzer.sources import open_binary

    with pytest.raises(InputError) as ei:
        open_binary(Source(path="x.log", real=str(tmp_path)))  # a directory cannot be opened as a file
    assert str(ei.value) == "x.log: cannot read: Is a directory"


def test_fast_path_only_for_plain_files(tmp_path):
    from nccl_analyzer.sources import plain_raw, sniff_source

    plain = tmp_path / "plain.log"
    plain.write_bytes((NCCL_LINE + b"\n") * 20)
    pasted = tmp_path / "pasted.log"
    pasted.write_bytes(b"".join(b"> " + NCCL_LINE + b"\n" for _ in range(20)))
    junk = tmp_path / "junk.log"
    junk.write_bytes(bytes(range(1, 9)) * 2000)
    got = {}
    long_head = tmp_path / "long.log"  # an over-long line in the head the paste check reads
    long_head.write_bytes(b"y" * (MAX_LINE + 10) + b"\n" + (NCCL_LINE + b"\n") * 20)
    for p in (plain, pasted, junk, long_head):
        src = expand_inputs([str(p)])[0]
        sniff_source(src)
        got[p.name] = plain_raw(src)
        assert src.warnings == []  # the check reads a private copy of the source: no warning counted twice
    assert got == {"plain.log": True, "pasted.log": False, "junk.log": False, "long.log": True}
    assert plain_raw(Source(path="-", real=None)) is False
    no_fast = expand_inputs([str(plain)])[0]
    no_fast.fast = False
    assert plain_raw(no_fast) is False


def test_markdown_quote_markers_are_dropped():
    assert _clean(b"> " + NCCL_LINE).text == NCCL_LINE.decode()
    assert _clean(b">").text == ""
    assert _clean(b">not a quote").text == ">not a quote"
    line = _clean(b"[rank2]:> " + NCCL_LINE)
    assert (line.text, line.rank) == (NCCL_LINE.decode(), 2)


def test_srun_label_once_seen_applies_to_later_lines():
    src = Source(path="t.log", real=None)
    first = clean_line(b"3: " + NCCL_LINE, src, 1)
    later = clean_line(b"3: loss 0.25", src, 2)
    assert (first.rank, later.rank, later.text) == (3, 3, "loss 0.25")
    assert _clean(b"3: loss 0.25").rank is None


def test_control_characters_and_bare_carriage_returns():
    assert _clean(b"\r\r\n").text == ""
    assert _clean(b"a\x07b\x08c\x7f\td").text == "abc\td"
    assert _clean("NCCL INFO caf\u00e9 \u2014 ok".encode()).text == "NCCL INFO caf\u00e9 \u2014 ok"


def test_pasted_log_keeps_numbers_raw_text_and_cut_marks(tmp_path):
    p = tmp_path / "pasted.log"
    p.write_bytes(b"> " + NCCL_LINE + b"\n> " + b"w" * (MAX_LINE + 5) + b"\n> " + NCCL_LINE + b"\n")
    src = expand_inputs([str(p)])[0]
    lines = list(iter_source(src))
    assert [(ln.lineno, ln.text[:8], ln.truncated) for ln in lines] == [
        (1, "vm:588:5", False), (2, "wwwwwwww", True), (3, "vm:588:5", False)]
    assert lines[0].raw == "> " + NCCL_LINE.decode() and src.lines == 3


def test_first_line_longer_than_a_read_block(tmp_path):
    from nccl_analyzer.sources import BLOCK

    p = tmp_path / "head.log"
    p.write_bytes(b"\xc3\xa9\xff" * (BLOCK // 3 + 5) + b"\n" + NCCL_LINE + b"\n")  # no newline in the first block
    src = expand_inputs([str(p)])[0]
    lines = list(iter_source(src))
    assert [(ln.lineno, ln.truncated) for ln in lines] == [(1, True), (2, False)]
    assert lines[0].text == (b"\xc3\xa9\xff" * (MAX_LINE // 3 + 1))[:MAX_LINE].decode("utf-8", "replace")
    assert lines[0].text.startswith("\u00e9\ufffd\u00e9") and lines[1].text == NCCL_LINE.decode()


def test_over_long_line_of_invalid_utf8_after_a_newline(tmp_path):
    from nccl_analyzer.sources import BLOCK

    p = tmp_path / "bad.log"
    p.write_bytes(b"ok\n" + b"\xff" * (BLOCK + 5) + b"\n" + NCCL_LINE + b"\n")
    lines = list(iter_source(expand_inputs([str(p)])[0]))
    assert [(ln.text[:3], ln.truncated) for ln in lines] == [("ok", False), ("\ufffd" * 3, True), ("vm:", False)]
    assert lines[1].text == "\ufffd" * MAX_LINE


def test_small_elf_input_is_named_as_a_binary_file_by_analyze(tmp_path):
    # a core dump shorter than the 8 KiB sniff (its first read already ends the file) next to a real log, and alone
    from nccl_analyzer.analysis import analyze
    from nccl_analyzer.binary import ELF_WHY

    core = tmp_path / "core.log"
    core.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(200))
    log = tmp_path / "rank0.log"
    log.write_text("vm:517:517 [1] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth9\n"
                   "vm:517:517 [1] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found\n")
    d = analyze([str(core), str(log)])
    assert d.root_cause is not None and d.root_cause.id == "socket_interface"
    assert f"{core}: skipped: {ELF_WHY}" in d.warnings
    with pytest.raises(InputError) as exc:
        analyze([str(core)])
    assert str(exc.value) == f"nothing to analyze: {core}: {ELF_WHY}"


def test_recursive_glob_finds_files_in_nested_folders(tmp_path):
    # torchrun --log-dir layout: logs/<attempt>/<local rank>/stderr.log, given as one quoted ** pattern
    for rel in ("logs/attempt_0/0/stderr.log", "logs/attempt_0/1/stderr.log", "logs/top.log"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    got = sorted(Path(s.path).relative_to(tmp_path).as_posix() for s in expand_inputs([f"{tmp_path}/logs/**/*.log"]))
    assert got == ["logs/attempt_0/0/stderr.log", "logs/attempt_0/1/stderr.log", "logs/top.log"]


def test_junk_in_the_middle_of_a_log_does_not_make_it_binary(tmp_path):
    # a log whose start is text, then a run of control bytes past the first 1 MiB block (a crashed writer's garbage),
    # then a WARN line: only the start decides text/binary; the WARN is read with its line number
    from nccl_analyzer.sources import BLOCK

    info = b"vm:516:516 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    head = info * (BLOCK // len(info) - 100)
    junk = bytes(range(1, 9)) * 64 + b"\n"
    p = tmp_path / "rank0.log"
    p.write_bytes(head + junk * 400 + NCCL_LINE + b"\n")
    src, lines = _read(p)
    assert src.binary is None and not any("binary" in w for w in src.warnings)
    n = head.count(b"\n") + 400 + 1
    assert lines[-1].lineno == n and lines[-1].text == NCCL_LINE.decode()


def test_a_newline_right_at_a_block_boundary(tmp_path):
    # the first 1 MiB block ends inside a line whose newline is the first byte of the next block, and the last
    # line has no newline: every line keeps its own number
    from nccl_analyzer.sources import BLOCK

    info = b"vm:516:516 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    body = info * (BLOCK // len(info) - 1)
    partial = b"x" * (BLOCK - len(body))  # fills the block exactly: its newline is byte BLOCK
    p = tmp_path / "rank0.log"
    p.write_bytes(body + partial + b"\n" + NCCL_LINE)
    src, lines = _read(p)
    n = body.count(b"\n")
    assert [ln.text for ln in lines[n:]] == [partial.decode(), NCCL_LINE.decode()]
    assert lines[-1].lineno == n + 2


def test_a_read_error_mid_file_keeps_what_was_read_and_says_so(tmp_path):
    # the disk returns EIO after the first block (a failing device, a network filesystem gone away)
    import io

    from nccl_analyzer.sources import BLOCK, read_text_lines

    data = b"vm:516:516 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n" * (BLOCK // 64)

    class FailingDisk(io.RawIOBase):
        def __init__(self):
            self.pos = 0

        def readable(self):
            return True

        def readinto(self, b):
            if self.pos >= BLOCK:
                raise OSError(5, "Input/output error")
            n = min(len(b), BLOCK - self.pos)
            b[:n] = data[self.pos:self.pos + n]
            self.pos += n
            return n

    src = Source(path=str(tmp_path / "rank0.log"), real=str(tmp_path / "rank0.log"))
    src.lines = 1234
    got = list(read_text_lines(io.BufferedReader(FailingDisk()), src, sniff=False))
    assert got and got[0] == (data.split(b"\n")[0].decode(), False)
    assert src.warnings == ["read error after 1234 lines: [Errno 5] Input/output error; analyzed what was readable"]


def test_srun_label_on_blank_and_short_lines():
    # srun --label prefixes every line of task 3, blank and short ones too ("3: ", "3: ok")
    src = Source(path="t.log", real=None)
    first = _clean(b"3: " + NCCL_LINE, src)
    assert (first.rank, first.text) == (3, NCCL_LINE.decode()) and src.srun
    assert [(ln.rank, ln.text) for ln in (_clean(b"3: ", src), _clean(b"3: ok", src))] == [(3, ""), (3, "ok")]
