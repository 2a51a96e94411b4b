"""Loader validation (path:line), selectors, predicates, the streaming matcher and its memory bounds."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nccl_analyzer.analysis import Analyzer, hits_for_text, lines_of_text
from nccl_analyzer.engine import check_rules, compile_selector, load_rules, parse_rule
from nccl_analyzer.engine.match import SelectorError, field_value
from nccl_analyzer.engine.run import CAP_PER_KEY
from nccl_analyzer.errors import RuleError
from nccl_analyzer.model import Event, Evidence

GOOD = textwrap.dedent('''\
    id = "nccl-test-thing"
    taxonomy = "other"
    title = "thing on {host}"
    status = "test"
    role = "root"
    severity = "error"
    confidence = 0.5
    description = "d"
    falsepositives = ["unknown"]
    references = ["https://example.org/x"]

    [match]
    [[match.all]]
    kind = "nccl.warn.*"
    msg = '~thing (?P<what>\\w+)'

    [fix]
    summary = "fix {what}"

    [[example]]
    expect = "match"
    log = \'\'\'
    node1:1:1 [0] init.cc:1 NCCL WARN thing broke
    \'\'\'

    [[example]]
    expect = "no-match"
    log = \'\'\'
    node1:1:1 [0] NCCL INFO thing broke
    \'\'\'
    ''')


def write(tmp_path: Path, text: str, name: str = "nccl-test-thing") -> Path:
    d = tmp_path / "nccl"
    d.mkdir(exist_ok=True)
    p = d / f"{name}.toml"
    p.write_text(text)
    return p


def test_good_rule_loads_and_checks(tmp_path):
    p = write(tmp_path, GOOD)
    rule = parse_rule(p)
    assert rule.id == "nccl-test-thing" and rule.family == "nccl"
    assert check_rules([rule]) == []


@pytest.mark.parametrize("old,new,key", [
    ('taxonomy = "other"', 'taxonomy = "bogus"', "taxonomy"),
    ('confidence = 0.5', 'confidence = 1.5', "confidence"),
    ('role = "root"', 'role = "boss"', "role"),
    ('falsepositives = ["unknown"]', 'falsepositives = []', "falsepositives"),
    ("msg = '~thing (?P<what>\\w+)'", "msg = '~thing (unclosed'", "msg"),
])
def test_schema_errors_name_path_and_line(tmp_path, old, new, key):
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(RuleError) as ei:
        parse_rule(p)
    err = ei.value
    assert err.path == str(p)
    want = next(i for i, line in enumerate(GOOD.replace(old, new).splitlines(), 1) if line.startswith(key))
    assert err.line == want, str(err)
    assert str(err).startswith(f"{p}:{want}:")


def test_toml_syntax_error_has_line(tmp_path):
    p = write(tmp_path, GOOD.replace('severity = "error"', 'severity = "error'))
    with pytest.raises(RuleError) as ei:
        parse_rule(p)
    assert ei.value.line == 6


def test_id_must_equal_stem_and_family(tmp_path):
    p = write(tmp_path, GOOD, name="nccl-other-name")
    with pytest.raises(RuleError, match="stem"):
        parse_rule(p)


def test_missing_no_match_example_is_an_error(tmp_path):
    text = GOOD.split("[[example]]\nexpect = \"no-match\"")[0]
    p = write(tmp_path, text)
    with pytest.raises(RuleError, match="no-match"):
        parse_rule(p)


def test_failing_example_is_reported(tmp_path):
    p = write(tmp_path, GOOD.replace("NCCL WARN thing broke", "NCCL WARN other failure"))
    problems = check_rules([parse_rule(p)])
    assert len(problems) == 1 and "expects match" in problems[0].message
    assert problems[0].line > 1


def test_extra_rule_dir_overrides_and_env_list(tmp_path):
    write(tmp_path, GOOD)
    rules = load_rules((str(tmp_path),))
    assert "nccl-test-thing" in {r.id for r in rules}
    rules2 = load_rules((), env_dirs=str(tmp_path))
    assert "nccl-test-thing" in {r.id for r in rules2}
    with pytest.raises(RuleError):
        load_rules((str(tmp_path / "missing"),))


def test_selector_ops():
    ev = Event(kind="nccl.warn.socket", path="p", line=1, text="t", rank=3,
               fields={"msg": "Connect to 10.0.0.2<43215> failed : No route to host", "code": 5})
    memo: dict = {}
    assert compile_selector({"kind": "nccl.warn.*", "msg": "~Connect to (?P<peer>\\S+) failed"}, "s").test(ev, memo) \
        == {"peer": "10.0.0.2<43215>"}
    assert compile_selector({"kind": "nccl.warn.*", "code": ">= 5"}, "s").test(ev, memo) == {}
    assert compile_selector({"kind": "nccl.warn.*", "code": "< 5"}, "s").test(ev, memo) is None
    assert compile_selector({"kind": "x", "rank": [1, 3]}, "s").test(ev, memo) == {}
    assert compile_selector({"kind": "x", "msg": "!~refused"}, "s").test(ev, memo) == {}
    assert compile_selector({"kind": "x", "missing": "!~refused"}, "s").test(ev, memo) == {}
    assert compile_selector({"kind": "x", "missing": "abc"}, "s").test(ev, memo) is None
    sel = compile_selector({"kind": ["nccl.warn.*", "torch.*"]}, "s")
    assert sel.accepts_kind("torch.cuda.oom") and not sel.accepts_kind("nccl.info")
    with pytest.raises(SelectorError):
        compile_selector({"msg": "x"}, "s")


def test_body_virtual_field_joins_lines():
    ev = Event(kind="python.traceback", path="p", line=1, text="Traceback (most recent call last):",
               fields={"lines": ["Traceback (most recent call last):", "KeyError: 'x'"], "message": "'x'",
                       "exc_type": "KeyError", "frames": [{"file": "a.py", "line": 1, "function": "f"}]})
    assert "KeyError: 'x'" in field_value(ev, "body")
    assert field_value(ev, "exc") == "KeyError: 'x'"
    assert field_value(ev, "last_frame_func") == "f"


def test_group_by_rank_and_none(tmp_path):
    rules = [parse_rule(write(tmp_path, GOOD.replace("[[match.all]]", 'group_by = "rank"\n[[match.none]]\nkind = "nccl.info"\nmsg = "~all good"\n\n[[match.all]]')))]
    log = ("a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 10 - Init START\n"
           "a:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 20 - Init START\n"
           "a:1:1 [0] init.cc:1 NCCL WARN thing one\n"
           "a:2:2 [1] init.cc:1 NCCL WARN thing two\n"
           "a:2:2 [1] NCCL INFO all good\n")
    hits = hits_for_text(log, rules)
    assert [h.ranks for h in hits] == [(0,)], "rank 1's WARN is cancelled by its own none-event"


def test_memory_is_bounded_per_rule_and_rank(tmp_path):
    rules = [parse_rule(write(tmp_path, GOOD))]
    a = Analyzer(rules=rules)
    line = "node1:7:7 [0] init.cc:1 NCCL WARN thing broke\n"
    for ln in lines_of_text(line * (CAP_PER_KEY * 4)):
        a.feed(ln)
    kept = sum(len(v) for st in a.matcher._states for sl in st.slots for v in sl.by_key.values())
    assert kept == CAP_PER_KEY
    assert a.matcher._states[0].slots[0].count == CAP_PER_KEY * 4
    d = a.finish()
    assert d.root_cause is not None and d.root_cause.fix.summary == "fix broke"


# -- the matcher's options, bound values, blamed ranks, evidence; titles and fixes as printed --------------------
EXAMPLES = GOOD[GOOD.index("[[example]]"):]


def make_rule(tmp_path: Path, match: str, title: str = "thing", fix: str = 'summary = "s"',
              name: str = "nccl-test-thing", role: str = "root"):
    text = (f'id = "{name}"\ntaxonomy = "other"\ntitle = "{title}"\nstatus = "test"\nrole = "{role}"\n'
            f'severity = "error"\nconfidence = 0.5\ndescription = "d"\nfalsepositives = ["unknown"]\n'
            f'references = ["https://example.org/x"]\n\n[match]\n{match}\n[fix]\n{fix}\n\n{EXAMPLES}')
    return parse_rule(write(tmp_path, text, name=name))


SOCKET = ("[2026-11-29 10:00:00] h1:7:7 [0] misc/socket.cc:50 NCCL WARN Net : Connect to 10.0.0.2<43215> failed : "
          "No route to host\n"
          "[2026-11-29 10:00:30] h2:8:8 [1] misc/socket.cc:50 NCCL WARN Net : Connect to 10.0.0.1<43215> failed : "
          "Connection refused\n")
INIT = ("h1:7:7 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x9 - Init START\n"
        "h2:8:8 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 2000 commId 0x9 - Init START\n")
REFUSED = '[[match.all]]\nkind = "nccl.warn.socket"\nmsg = "~refused"\n'
NO_ROUTE = '[[match.all]]\nkind = "nccl.warn.socket"\nmsg = "~No route"\n'


def test_within_bounds_the_time_between_the_matched_events(tmp_path):
    for within, want in ((29, 0), (30, 1), (31, 1)):
        rules = [make_rule(tmp_path, f"within = {within}\n" + NO_ROUTE + REFUSED)]
        assert len(hits_for_text(SOCKET, rules)) == want, within


def test_ordered_needs_the_all_selectors_in_log_order(tmp_path):
    assert len(hits_for_text(SOCKET, [make_rule(tmp_path, "ordered = true\n" + NO_ROUTE + REFUSED)])) == 1
    assert hits_for_text(SOCKET, [make_rule(tmp_path, "ordered = true\n" + REFUSED + NO_ROUTE)]) == []
    [hit] = hits_for_text(SOCKET, [make_rule(tmp_path, REFUSED + NO_ROUTE)])
    assert [ev.line for ev in hit.events] == [1, 2] and hit.seq == 1  # the key event is the earliest one


def test_any_and_none_selectors(tmp_path):
    anys = ('[[match.any]]\nkind = "nccl.warn.socket"\nmsg = "~refused"\n'
            '[[match.any]]\nkind = "nccl.warn.socket"\nmsg = "~No route"\n')
    [hit] = hits_for_text(SOCKET, [make_rule(tmp_path, anys)])
    assert hit.count == 2 and [e.line for e in hit.events] == [1, 2]
    none = '[[match.none]]\nkind = "nccl.warn.socket"\nmsg = "~No route"\n'
    assert hits_for_text(SOCKET, [make_rule(tmp_path, REFUSED + none)]) == []
    only_any = '[[match.any]]\nkind = "nccl.warn.socket"\nmsg = "~timed out"\n'
    assert hits_for_text(SOCKET, [make_rule(tmp_path, REFUSED + only_any)]) == []


def test_group_by_host_and_rank(tmp_path):
    sel = 'group_by = "host"\n[[match.all]]\nkind = "nccl.warn.socket"\n'
    hits = hits_for_text(INIT + SOCKET, [make_rule(tmp_path, sel)])
    assert sorted((h.group, h.ranks, h.hosts) for h in hits) == [("h1", (0,), ("h1",)), ("h2", (1,), ("h2",))]
    hits = hits_for_text(INIT + SOCKET, [make_rule(tmp_path, sel.replace('"host"', '"rank"'))])
    assert sorted(h.group for h in hits) == [0, 1]
    [hit] = hits_for_text(INIT + SOCKET, [make_rule(tmp_path, sel.replace('"host"', '"job"'))])
    assert (hit.group, hit.ranks, hit.hosts, hit.count) == ("job", (0, 1), ("h1", "h2"), 2)
    # without Init lines no rank is known: ranks group by process, hosts by the NCCL prefix
    hits = hits_for_text(SOCKET, [make_rule(tmp_path, sel.replace('"host"', '"rank"'))])
    assert sorted(h.group for h in hits) == [("h1", 7), ("h2", 8)] and all(h.ranks == () for h in hits)


def test_bound_values_and_rank_capture_groups(tmp_path):
    sel = '[[match.all]]\nkind = "nccl.warn.socket"\nmsg = "~Connect to (?P<peer_addr>[\\\\d.]+)<(?P<port>\\\\d+)>"\n'
    [hit] = hits_for_text(SOCKET, [make_rule(tmp_path, sel, title="no route to {peer_addr}[ on {host}]")])
    assert (hit.bound["peer_addr"], hit.bound["port"], hit.bound["host"]) == ("10.0.0.2", "43215", "h1")
    assert hit.bound["errno_text"] == "No route to host"  # the key event's own fields are bound too
    assert hit.finding().title == "no route to 10.0.0.2 on h1"
    named = ("h3:9:9 [0] misc/socket.cc:50 NCCL WARN Net : peer rank 3 and rank 1 closed the connection\n")
    sel = ('[[match.all]]\nkind = "nccl.warn.*"\n'
           'msg = "~rank (?P<rank_a>\\\\d+) and rank (?P<rank_b>\\\\d+)"\n')
    [hit] = hits_for_text(named, [make_rule(tmp_path, sel)])
    assert hit.ranks == (1, 3) and hit.bound["ranks"] == "1, 3" and hit.bound["rank"] == 1


def test_predicates_optional_blame_only_and_evidence_first(tmp_path):
    env = "h1:7:7 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth9\n"
    sel = 'predicates = [{ name = "env_setting", var = "NCCL_SOCKET_IFNAME" }]\n' + REFUSED
    assert hits_for_text(INIT + SOCKET, [make_rule(tmp_path, sel)]) == []
    opt = 'predicates = [{ name = "env_setting", var = "NCCL_SOCKET_IFNAME", optional = true }]\n' + REFUSED
    [hit] = hits_for_text(INIT + SOCKET, [make_rule(tmp_path, opt)])
    assert hit.ranks == (1,) and not hit.victims_only
    [hit] = hits_for_text(env + INIT + SOCKET, [make_rule(tmp_path, sel)])
    assert hit.bound["env_value"] == "eth9" and [e.line for e in hit.evidence] == [5, 1]
    first = ('predicates = [{ name = "env_setting", var = "NCCL_SOCKET_IFNAME", '
             'evidence_first = true }]\n') + REFUSED
    [hit] = hits_for_text(env + INIT + SOCKET, [make_rule(tmp_path, first)])
    assert [e.line for e in hit.evidence] == [1, 5]
    blame = ('predicates = [{ name = "env_setting", var = "NCCL_SOCKET_IFNAME", '
             'blame_only = true }]\n') + REFUSED
    [hit] = hits_for_text(env + INIT + SOCKET, [make_rule(tmp_path, blame)])
    assert (hit.ranks, hit.event_ranks, hit.victims_only) == ((), (1,), True)


def test_a_predicate_only_rule_matches_the_job(tmp_path):
    env = "h1:7:7 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1\n"
    rule = make_rule(tmp_path, 'predicates = [{ name = "env_setting", var = "NCCL_IB_DISABLE", value = "^1$" }]\n',
                     title="IB off ({NCCL_IB_DISABLE})")
    [hit] = hits_for_text(env, [rule])
    assert (hit.group, hit.seq, hit.finding().title, [e.line for e in hit.evidence]) == ("job", 0, "IB off (1)", [1])
    assert hits_for_text(env.replace("to 1", "to 0"), [rule]) == []


def test_hits_by_role_and_skipped_events(tmp_path):
    from nccl_analyzer.analysis import Analyzer

    rules = [make_rule(tmp_path, REFUSED), make_rule(tmp_path, NO_ROUTE, name="nccl-test-other", role="symptom")]
    a = Analyzer(rules=rules)
    for ln in lines_of_text(SOCKET):
        a.feed(ln)
    a.flush()
    assert sorted(h.rule.id for h in a.matcher.hits(a.builder)) == ["nccl-test-other", "nccl-test-thing"]
    assert [h.rule.id for h in a.matcher.hits(a.builder, roles=("symptom",))] == ["nccl-test-other"]
    assert [h.rule.id for h in a.matcher.hits(a.builder, skip=lambda ev: ev.line == 2)] == ["nccl-test-other"]


def test_finding_carries_the_rendered_rule(tmp_path):
    rule = make_rule(tmp_path, '[[match.all]]\nkind = "nccl.warn.socket"\nmsg = "~Connect to (?P<peer>\\\\S+) failed"\n',
                     title="cannot reach {peer}", fix='summary = "open {peer}"')
    [hit] = hits_for_text(INIT + SOCKET, [rule])
    f = hit.finding()
    assert (f.rule, f.id, f.role, f.severity, f.confidence) == ("nccl-test-thing", "other", "root", "error", 0.5)
    assert (f.title, f.fix.summary, f.ranks, f.hosts) == ("cannot reach 10.0.0.2<43215>", "open 10.0.0.2<43215>",
                                                          (0, 1), ("h1", "h2"))
    assert f.time == "2026-11-29 10:00:00" and hit.time is not None
    assert [e.line for e in f.evidence] == [3, 4] and f.explanation == "d"
    assert not any(k.startswith("_") for k in f.bound) and f.bound["peer"] == "10.0.0.2<43215>"
    g = hit.finding(role="symptom", confidence=0.25)
    assert (g.role, g.confidence) == ("symptom", 0.25)


def test_render_title_and_template():
    from nccl_analyzer.engine.run import render_template, render_title

    assert render_title("thing on {host}", {"host": "h1"}) == "thing on h1"
    assert render_title("thing on {host}", {}) == "thing on ?"
    assert render_title("thing on {host}", {"host": ""}) == "thing on ?"
    assert render_title("Address in use (port {port})", {}) == "Address in use"
    assert render_title("Address in use (port {port})", {"port": 29500}) == "Address in use (port 29500)"
    assert render_title("Crash[ on rank {rank}]", {}) == "Crash"
    assert render_title("Crash[ on rank {rank}] of {what}", {"rank": 0}) == "Crash on rank 0 of ?"
    assert render_title("[NET] {a} (see {b}) and (x)", {"a": 1}) == "[NET] 1 and (x)"
    assert render_template("Rank[ {rank}] ran out", {}) == "Rank ran out"
    assert render_template("Rank[ {rank}] ran out of {what}", {"rank": 2}) == ""
    assert render_template("Rank[ {rank}] ran out of {what}", {"rank": 2, "what": "memory"}) == \
        "Rank 2 ran out of memory"
    assert render_template("[brackets] stay", {}) == "[brackets] stay"


def test_make_fix_tailors_the_summary_env_and_commands(tmp_path):
    from nccl_analyzer.engine.run import make_fix

    rule = make_rule(tmp_path, NO_ROUTE, fix='summary = "set NCCL_SOCKET_IFNAME[ (not {ifname})]"\n'
                     'bound_summary = ["use {iface} instead of {ifname}", "do not use {ifname}"]\n'
                     'env = { NCCL_SOCKET_IFNAME = "{iface}", NCCL_DEBUG = "INFO" }\n'
                     'commands = ["ip -br addr[ | grep {iface}]", "ping {peer}"]')
    full = make_fix(rule, {"iface": "eth0", "ifname": "eth9", "peer": "h2"})
    assert (full.summary, full.env, full.commands) == (
        "use eth0 instead of eth9", {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"},
        ("ip -br addr | grep eth0", "ping h2"))
    part = make_fix(rule, {"ifname": "eth9"})
    assert (part.summary, part.env, part.commands) == ("do not use eth9", {"NCCL_DEBUG": "INFO"}, ("ip -br addr",))
    bare = make_fix(rule, {})
    assert bare.summary == "set NCCL_SOCKET_IFNAME"
    rule2 = make_rule(tmp_path, NO_ROUTE, fix='summary = "open port {port} to {peer}"')
    assert make_fix(rule2, {"port": 1}).summary == "open port <port> to <peer>"


@pytest.mark.parametrize(("torch", "env", "summary"), [
    ("2.11.0", {"TORCH_FR_BUFFER_SIZE": "2000"}, "set TORCH_FR_BUFFER_SIZE=2000 and rerun"),
    ("2.12.1+cu128", {"TORCH_FR_BUFFER_SIZE": "2000"}, "set TORCH_FR_BUFFER_SIZE=2000 and rerun"),
    ("2.10.0", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, "set TORCH_NCCL_TRACE_BUFFER_SIZE=2000 and rerun"),
    ("1.13.1", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, "set TORCH_NCCL_TRACE_BUFFER_SIZE=2000 and rerun"),
    (None, {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"},
     "set TORCH_FR_BUFFER_SIZE=2000 (TORCH_NCCL_TRACE_BUFFER_SIZE=2000 before torch 2.11) and rerun"),
])
def test_a_renamed_torch_variable_is_given_under_the_name_that_torch_reads(tmp_path, torch, env, summary):
    from nccl_analyzer.engine.run import make_fix

    rule = make_rule(tmp_path, NO_ROUTE, fix='summary = "set TORCH_NCCL_TRACE_BUFFER_SIZE=2000 and rerun"\n'
                     'env = { TORCH_NCCL_TRACE_BUFFER_SIZE = "2000" }\n'
                     'commands = ["export TORCH_NCCL_TRACE_BUFFER_SIZE=2000"]')
    fx = make_fix(rule, {}, torch_version=torch)
    assert (fx.env, fx.summary) == (env, summary)
    want_cmd = "TORCH_NCCL_TRACE_BUFFER_SIZE" if torch in ("2.10.0", "1.13.1") else "TORCH_FR_BUFFER_SIZE"
    assert fx.commands == (f"export {want_cmd}=2000",)


def test_a_renamed_variable_named_twice_in_the_summary_is_renamed_twice(tmp_path):
    from nccl_analyzer.engine.run import make_fix

    rule = make_rule(tmp_path, NO_ROUTE, fix='summary = "set TORCH_NCCL_TRACE_BUFFER_SIZE=2000 and rerun; '
                     'TORCH_NCCL_TRACE_BUFFER_SIZE sizes the Flight Recorder ring"\n'
                     'env = { TORCH_NCCL_TRACE_BUFFER_SIZE = "2000" }')
    fx = make_fix(rule, {}, torch_version="2.12.1")
    assert fx.summary == "set TORCH_FR_BUFFER_SIZE=2000 and rerun; TORCH_FR_BUFFER_SIZE sizes the Flight Recorder ring"


def test_evidence_is_the_telling_line_deduplicated_and_capped():
    from nccl_analyzer.engine.run import EVIDENCE_CAP, key_line, quote

    tb = Event(kind="python.traceback", path="p", line=10, text="Traceback (most recent call last):",
               fields={"lines": ["Traceback (most recent call last):", '  File "a.py", line 1, in f',
                                 "RuntimeError: Last error:", "socket closed", "  (hint)"],
                       "line_numbers": [10, 11, 12, 13, 15]})
    assert key_line(tb) == key_line(tb, {}) == Evidence("p", 12, "RuntimeError: Last error:")
    # a body match quotes the line that matched; a label line ("Last error:") gives way to the next one
    assert key_line(tb, {"_match_text": "Last error:\nsocket closed"}) == Evidence("p", 13, "socket closed")
    assert key_line(tb, {"_match_text": "(hint)"}) == Evidence("p", 15, "  (hint)")
    labelled = Event(kind="python.traceback", path="p", line=1, text="Traceback (most recent call last):",
                     fields={"lines": ["Traceback (most recent call last):", "RuntimeError: failed", "Last error:",
                                       "detail"]})
    assert key_line(labelled, {"_match_text": "Last error:"}) == Evidence("p", 3, "Last error:")  # only the label
    no_numbers = Event(kind="python.traceback", path="p", line=10, text="Traceback (most recent call last):",
                       fields={"lines": ["Traceback (most recent call last):", "ValueError: x"]})
    assert key_line(no_numbers) == Evidence("p", 11, "ValueError: x")
    exc = Event(kind="python.traceback", path="p", line=10, text="Traceback (most recent call last):",
                fields={"lines": ["Traceback (most recent call last):", "ValueError: x"], "exc_line": 40,
                        "exc_text": "ValueError: x"})
    assert key_line(exc) == Evidence("p", 40, "ValueError: x")
    nccl = Event(kind="nccl.warn.socket", path="p", line=3, text="h:1:1 [0] NCCL WARN x",
                 fields={"lines": ["h:1:1 [0] NCCL WARN x", "h:1:1 [0] NCCL WARN y"]})
    assert key_line(nccl) == Evidence("p", 3, "h:1:1 [0] NCCL WARN x")  # not a traceback: its first line
    same = [Event(kind="nccl.warn.socket", path="p", line=i, text=f"h{i}:{i}:{i} [0] NCCL WARN same") for i in (1, 2)]
    same += [Event(kind="nccl.warn.socket", path="p", line=3, text="h3:3:3 [0] NCCL WARN other")]
    assert [e.line for e in quote(same)] == [1, 3]  # the same message from another host is quoted once
    many = [Event(kind="nccl.warn.socket", path="p", line=i, text=f"NCCL WARN {i}") for i in range(1, 10)]
    assert [e.line for e in quote(many)] == list(range(1, EVIDENCE_CAP + 1))


def test_field_tests_equality_numbers_booleans_and_regex():
    ev = Event(kind="torch.watchdog.timeout", path="p", line=1, text="t", rank=0,
               fields={"op_type": "ALLREDUCE", "seq": "42", "timeout_ms": 600000, "overdue": True, "async": "True",
                       "note": None})
    memo: dict = {}

    def ok(**sel) -> bool:
        return compile_selector({"kind": "torch.*", **sel}, "s").test(ev, memo) is not None

    assert ok(op_type="ALLREDUCE") and not ok(op_type="allreduce") and ok(op_type="!=BROADCAST")
    assert not ok(op_type="!= ALLREDUCE") and ok(missing="!=x")  # an absent field differs from any value
    assert ok(seq=42) and ok(seq=42.0) and not ok(seq=41) and not ok(op_type=1)
    assert ok(seq=">= 42") and ok(seq="<= 42") and ok(seq="== 42") and ok(seq="!= 41") and ok(seq="> 41.5")
    assert not ok(seq="> 42") and not ok(seq="< 42") and ok(seq="< 42.5") and ok(timeout_ms=">= -1")
    assert not ok(op_type=">= 1")  # a field that is no number fails a numeric test
    assert ok(overdue=True) and not ok(overdue=False) and ok(**{"async": True}) and not ok(seq=True)
    assert ok(op_type="~^ALL") and not ok(op_type="~^BROAD") and ok(op_type="!~^BROAD") and not ok(op_type="!~ALL")
    assert ok(note="!~x") and not ok(note="~.*") and not ok(note="x")
    assert ok(op_type=["BROADCAST", "~REDUCE$"]) and not ok(op_type=["BROADCAST", "~^REDUCE"])
    assert ok(text="t") and not ok(text="~x")


def test_selector_kinds_labels_and_compile_errors():
    sel = compile_selector({"kind": "nccl.warn.*", "label": "the WARN"}, "all[0]")
    assert (sel.name, sel.kinds, sel.tests) == ("the WARN", ("nccl.warn.*",), ())
    assert sel.accepts_kind("nccl.warn.socket") and not sel.accepts_kind("nccl.warn") \
        and not sel.accepts_kind("xnccl.warn.socket")
    assert compile_selector({"kind": ["torch.cuda.?om", "python.traceback"]}, "s").accepts_kind("torch.cuda.oom")
    for bad, msg in (({"kind": ""}, "a selector needs 'kind'"), ({"kind": []}, "a selector needs 'kind'"),
                     ({"kind": ["a.b", 3]}, "a selector needs 'kind'"),
                     ({"kind": "NCCL WARN"}, "kind 'NCCL WARN' is not a dotted event kind or glob"),
                     ({"kind": "a.b", "bad-name": 1}, "field name 'bad-name' is not an identifier"),
                     ({"kind": "a.b", "msg": "~(x"}, "field 'msg': bad regex '(x': "),
                     ({"kind": "a.b", "msg": None}, "field 'msg': use a string, number, boolean or a list of them")):
        with pytest.raises(SelectorError) as ei:
            compile_selector(bad, "s")
        assert str(ei.value).startswith(msg), (bad, str(ei.value))
        assert ei.value.key == ("kind" if "kind" in msg else next(k for k in bad if k != "kind"))


def test_virtual_fields_of_an_event():
    ev = Event(kind="python.traceback", path="p", line=5, text="Traceback (most recent call last):",
               fields={"lines": ["Traceback (most recent call last):", "RuntimeError: boom"],
                       "msg": "boom", "detail": "extra detail", "error": "", "message": "boom",
                       "chain": [{"exc_type": "OSError", "message": "disk"}, "junk",
                                 {"exc_type": "RuntimeError", "message": "boom"}],
                       "exc_type": "RuntimeError",
                       "frames": [{"file": "a.py", "func": "main"}, ("b.py", 3, "step"), "bad",
                                  '  File "c.py", line 9, in inner', {"path": "d.py", "name": "leaf"}]})
    assert field_value(ev, "body") == ("Traceback (most recent call last):\nRuntimeError: boom\nextra detail\n"
                                       "OSError: disk")
    assert field_value(ev, "exc") == "RuntimeError: boom"
    assert field_value(ev, "frames_text") == "a.py:main\nb.py:step\nc.py:inner\nd.py:leaf"
    assert (field_value(ev, "last_frame_file"), field_value(ev, "last_frame_func")) == ("d.py", "leaf")
    assert (field_value(ev, "text"), field_value(ev, "kind")) == ("Traceback (most recent call last):",
                                                                  "python.traceback")
    bare = Event(kind="nccl.warn.x", path="p", line=1, text="one line", fields={"lines": []})
    assert field_value(bare, "body") == "one line" and field_value(bare, "exc") is None
    assert field_value(bare, "frames_text") is None and field_value(bare, "last_frame_func") is None
    memo: dict = {}
    assert field_value(bare, "body", memo) == "one line" and memo == {"body": "one line"}
    memo["body"] = "remembered"
    assert field_value(bare, "body", memo) == "remembered"  # one computation per event and field


def test_rank_lists_and_lagging_bound():
    from nccl_analyzer.engine.match import _lagging_bound, _missing_ranks, _rank_list, _who, kind_matches

    assert (_who((3,)), _who((0, 1, 2, 3, 5))) == ("rank 3", "ranks 0-3, 5")
    assert _rank_list((1, 3)) == "1, 3"
    assert kind_matches(("nccl.warn.*", "torch.*"), "torch.cuda.oom") and not kind_matches(("nccl.*",), "torch.x")
    b = _builder(INIT)
    assert _lagging_bound(b, (1,), "lagging {who}") == {"lagging": "1", "lagging_who": "rank 1",
                                                        "lagging_what": "lagging rank 1", "lagging_pid": 8}
    assert _lagging_bound(b, (0, 1), "{list} stuck") == {"lagging": "0-1", "lagging_who": "ranks 0-1",
                                                         "lagging_what": "0-1 stuck"}
    assert _missing_ranks(b, {0}) == (1,)  # half the world reported: the silent half is missing
    assert _missing_ranks(b, {0, 1}) == ()
    b.lagging.add(1)
    assert _missing_ranks(b, {0, 1}) == (1,)  # a desync report's ranks win


def _builder(text: str):
    a = Analyzer()
    for ln in lines_of_text(text):
        a.feed(ln)
    a.flush()
    b = a.builder
    b.build()
    return b


def test_the_live_verdict_follows_each_new_root_match(tmp_path):
    # the live view asks for a provisional verdict after every line; it is recomputed when a root rule matched
    a = Analyzer(rules=[parse_rule(write(tmp_path, GOOD))])
    assert a.provisional() is None
    [line] = lines_of_text("node1:7:7 [0] NCCL INFO all fine\n")
    a.feed(line)
    assert a.provisional() is None
    [line] = lines_of_text("node1:7:7 [0] init.cc:1 NCCL WARN thing broke\n")
    a.feed(line)
    rc = a.provisional()
    assert rc is not None and (rc.rule, rc.fix.summary) == ("nccl-test-thing", "fix broke")
