"""Rule files: every schema error is one message naming path:line of the offending key; what a valid file loads to;
overrides, explains, rule_files and check_rules."""
from __future__ import annotations

import pytest

from nccl_analyzer.engine import Problem, check_rules, load_rules, parse_rule, rule_files
from nccl_analyzer.engine.loader import KNOWN_KEYS, TAXONOMY_IDS, placeholders
from nccl_analyzer.engine.match import PREDICATES
from nccl_analyzer.errors import RuleError

from test_engine import GOOD, write


def _err(tmp_path, text: str, name: str = "nccl-test-thing", folder: str = "nccl") -> RuleError:
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    p = d / f"{name}.toml"
    p.write_text(text)
    with pytest.raises(RuleError) as ei:
        parse_rule(p)
    return ei.value


def _line(text: str, start: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if ln.lstrip().startswith(start))


def _sub(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


KNOWN = ", ".join(sorted(KNOWN_KEYS))
CASES = [
    # (text, message, the line's start (None: line 1))
    (_sub('severity = "error"\n', ""), "missing required key 'severity'", None),
    (_sub("[match]", 'colour = "red"\n\n[match]'), f"unknown key 'colour' (known: {KNOWN})", "colour"),
    (_sub('id = "nccl-test-thing"', 'id = "nccl_test"'),
     "id must be kebab-case with a family prefix, e.g. 'nccl-socket-no-interface'", "id"),
    (_sub('id = "nccl-test-thing"', 'id = "nccl-test-other"'),
     "id 'nccl-test-other' must equal the file name stem 'nccl-test-thing'", "id"),
    ("# a comment above the id\n" + _sub('id = "nccl-test-thing"', 'id = "nccl-test-other"'),
     "id 'nccl-test-other' must equal the file name stem 'nccl-test-thing'", "id"),
    (_sub('taxonomy = "other"', 'taxonomy = "bogus"'),
     f"taxonomy 'bogus' is not a TAXONOMY.md id ({', '.join(TAXONOMY_IDS)})", "taxonomy"),
    (_sub('role = "root"', 'role = "boss"'), "role must be one of root, symptom, cascade", "role"),
    (_sub('status = "test"', 'status = "beta"'), "status must be one of stable, experimental, test, deprecated",
     "status"),
    (_sub('severity = "error"', 'severity = "fatal"'), "severity must be one of critical, error, warning, info",
     "severity"),
    (_sub("confidence = 0.5", "confidence = 0"), "confidence must be a number in (0, 1]", "confidence"),
    (_sub("confidence = 0.5", "confidence = 1.01"), "confidence must be a number in (0, 1]", "confidence"),
    (_sub("confidence = 0.5", "confidence = true"), "confidence must be a number in (0, 1]", "confidence"),
    (_sub("confidence = 0.5", 'confidence = "0.5"'), "confidence must be a number in (0, 1]", "confidence"),
    (_sub('title = "thing on {host}"', 'title = "  "'), "'title' must be a non-empty string", "title"),
    (_sub('description = "d"', "description = 3"), "'description' must be a non-empty string", "description"),
    (_sub('falsepositives = ["unknown"]', 'falsepositives = ["unknown", " "]'),
     'falsepositives must be a non-empty list of strings (write "unknown" if none are known)', "falsepositives"),
    (_sub('falsepositives = ["unknown"]', 'falsepositives = "unknown"'),
     'falsepositives must be a non-empty list of strings (write "unknown" if none are known)', "falsepositives"),
    (_sub('references = ["https://example.org/x"]', 'references = ["https://example.org/x", "example.org"]'),
     "references must be a non-empty list of http(s) permalinks", "references"),
    (_sub('references = ["https://example.org/x"]', "references = []"),
     "references must be a non-empty list of http(s) permalinks", "references"),
    (_sub("[match]", 'explains = "peer_exit"\n\n[match]'), "explains must be a list of rule ids or taxonomy ids",
     "explains"),
    (_sub("[match]", "explains = [1]\n\n[match]"), "explains must be a list of rule ids or taxonomy ids", "explains"),
    (_sub('summary = "fix {what}"', 'summary = " "'), "fix must be a table with a non-empty 'summary'", "[fix]"),
    (_sub('summary = "fix {what}"', 'summary = "fix {what}"\nurl = "x"'),
     "unknown fix key 'url' (summary, bound_summary, env, commands)", "[fix]"),
    (_sub('summary = "fix {what}"', 'summary = "fix {what}"\nbound_summary = 3'),
     "fix.bound_summary is a template string or a list of them (tried in order)", "[fix]"),
    (_sub('summary = "fix {what}"', 'summary = "fix {what}"\nbound_summary = ["a", 1]'),
     "fix.bound_summary is a template string or a list of them (tried in order)", "[fix]"),
    (_sub('summary = "fix {what}"', 'summary = "fix {what}"\nenv = { NCCL_DEBUG = 1 }'),
     "fix.env must be a table of strings", "[fix]"),
    (_sub('summary = "fix {what}"', 'summary = "fix {what}"\nenv = "NCCL_DEBUG=INFO"'),
     "fix.env must be a table of strings", "[fix]"),
    (_sub('summary = "fix {what}"', 'summary = "fix {what}"\ncommands = "ls"'),
     "fix.commands must be a list of strings", "[fix]"),
    (_sub('summary = "fix {what}"', 'summary = "fix {what}"\ncommands = ["ls", 2]'),
     "fix.commands must be a list of strings", "[fix]"),
    (_sub('status = "test"', 'status = "deprecated"'), "a deprecated rule names its successor in 'replaced_by'",
     "status"),
    (_sub("[[match.all]]", 'none_scope = "host"\n[[match.all]]'), 'none_scope is "job" or "rank"', "none_scope"),
    (_sub("[[match.all]]", "colour = 1\n[[match.all]]"),
     "unknown match key 'colour' (all, any, none, within, group_by, ordered, predicates, none_scope)", "colour"),
    (_sub('kind = "nccl.warn.*"', 'knd = "nccl.warn.*"'),
     "match.all[0]: a selector needs 'kind' (a glob such as \"nccl.warn.*\", or a list of them)", "[[match.all]]"),
    (_sub('kind = "nccl.warn.*"', 'kind = "NCCL WARN"'),
     "match.all[0]: kind 'NCCL WARN' is not a dotted event kind or glob", "kind"),
    (_sub("msg = '~thing (?P<what>\\w+)'", "msg = []"), "match.all[0]: field 'msg': empty list", "msg"),
    (_sub("msg = '~thing (?P<what>\\w+)'", "msg = { a = 1 }"),
     "match.all[0]: field 'msg': use a string, number, boolean or a list of them", "msg"),
    (_sub("[[match.all]]", 'predicates = ["no_such_thing"]\n[[match.all]]'),
     f"unknown predicate 'no_such_thing' (known: {', '.join(sorted(PREDICATES))})", "predicates"),
    (_sub("[[match.all]]", "predicates = [3]\n[[match.all]]"), "predicates must be names or tables with 'name'",
     "predicates"),
    (_sub("[[match.all]]", "within = -1\n[[match.all]]"), "within is a positive number of seconds", "within"),
    (_sub("[[match.all]]", 'within = "5"\n[[match.all]]'), "within is a positive number of seconds", "within"),
    (_sub("[[match.all]]", 'group_by = "pod"\n[[match.all]]'), "group_by must be one of rank, host, job", "group_by"),
    (_sub("[[match.all]]", 'ordered = "yes"\n[[match.all]]'), "ordered is true or false", "ordered"),
    (_sub("[[match.all]]", "[[match.none]]"), "match needs at least one 'all' or 'any' selector or a predicate",
     "[match]"),
    (_sub("[match]", 'example = "x"\n\n[match]').split("[[example]]")[0], "example must be an array of tables "
     "([[example]])", "example"),
    (_sub('expect = "no-match"', 'expect = "maybe"'),
     "each [[example]] needs expect = \"match\"|\"no-match\" and log = '''...'''", None),
    (_sub('expect = "no-match"', 'expect = "no-match"\ndumps = "{}"'),
     "an example's dumps = [...] holds Flight Recorder dumps as JSON strings", None),
    (_sub('expect = "no-match"', 'expect = "match"'),
     "a rule needs at least one [[example]] expect=\"match\" and one expect=\"no-match\"", "[[example]]"),
]


@pytest.mark.parametrize(("text", "message", "start"), CASES, ids=[f"{i}-{c[1][:30]}" for i, c in enumerate(CASES)])
def test_each_schema_error_is_one_message_at_its_line(tmp_path, text, message, start):
    err = _err(tmp_path, text)
    if start is None and message.startswith(("each [[example]]", "an example's")):
        # the second [[example]] table is the offending one
        want = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() == "[[example]]"][1]
    else:
        want = _line(text, start) if start else 1
    assert str(err) == f"{err.path}:{want}: {message}"
    assert err.path.endswith("nccl-test-thing.toml")


def test_family_folder_must_prefix_the_id(tmp_path):
    err = _err(tmp_path, GOOD, folder="torch")
    assert str(err) == f"{err.path}:1: id 'nccl-test-thing' must start with its family folder name 'torch-'"


def test_unreadable_rule_file(tmp_path):
    p = write(tmp_path, "")
    p.write_bytes(b"id = \"\xff\xfe\"\n")
    with pytest.raises(RuleError) as ei:
        parse_rule(p)
    assert str(ei.value).startswith(f"{p}: cannot read rule file: ")


def test_valid_rule_loads_normalised(tmp_path):
    text = _sub('description = "d"', 'description = """\n  two   lines\n  of text\n"""') \
        .replace('title = "thing on {host}"', 'title = "  thing on {host}  "') \
        .replace('summary = "fix {what}"', 'summary = "  fix {what} "\nbound_summary = ["a {x}", "b"]\n'
                 'env = { NCCL_DEBUG = "INFO" }\ncommands = ["ls {what}"]') \
        .replace("[[match.all]]", 'within = 5\ngroup_by = "rank"\nordered = true\n'
                 'predicates = ["socket_interfaces", { name = "env_setting", var = "NCCL_X" }]\n[[match.all]]') \
        .replace("[match]", 'explains = ["peer_exit"]\nreplaced_by = "nccl-new-thing"\n\n[match]') \
        .replace('expect = "no-match"', 'expect = "no-match"\nname = "an INFO line"')
    rule = parse_rule(write(tmp_path, text))
    assert (rule.title, rule.description, rule.confidence, rule.explains) == \
        ("thing on {host}", "two lines of text", 0.5, ("peer_exit",))
    assert rule.fix == {"summary": "fix {what}", "bound_summary": ["a {x}", "b"], "env": {"NCCL_DEBUG": "INFO"},
                        "commands": ["ls {what}"]}
    m = rule.match
    assert (m.within, m.group_by, m.ordered) == (5.0, "rank", True)
    assert m.predicates == (("socket_interfaces", {}), ("env_setting", {"var": "NCCL_X"}))
    assert [s.name for s in m.all] == ["all[0]"] and m.any == () and m.none == ()
    assert [(e.expect, e.name, e.dumps) for e in rule.examples] == [("match", "", ()), ("no-match", "an INFO line", ())]
    assert [e.line for e in rule.examples] == [i for i, ln in enumerate(text.splitlines(), 1) if ln == "[[example]]"]
    assert rule.examples[0].log.strip() == "node1:1:1 [0] init.cc:1 NCCL WARN thing broke"
    assert (rule.replaced_by, rule.family, rule.status, rule.role, rule.severity) == \
        ("nccl-new-thing", "nccl", "test", "root", "error")
    assert rule.line_of("taxonomy") == 2 and rule.line_of("fix") == _line(text, "[fix]")
    assert rule.line_of("no-such-key") == 1
    assert rule.to_dict() == {  # what `rules show` prints
        "id": "nccl-test-thing", "taxonomy": "other", "title": "thing on {host}", "status": "test", "role": "root",
        "severity": "error", "confidence": 0.5, "description": "two lines of text", "explains": ["peer_exit"],
        "fix": rule.fix, "falsepositives": ["unknown"], "references": ["https://example.org/x"], "examples": 2,
        "path": rule.path}
    assert placeholders(rule.fix["commands"][0]) == ["what"]
    # defaults
    plain = parse_rule(write(tmp_path, GOOD))
    assert (plain.match.within, plain.match.group_by, plain.match.ordered, plain.match.predicates) == \
        (None, "job", False, ())
    assert plain.fix == {"summary": "fix {what}", "bound_summary": "", "env": {}, "commands": []}
    assert plain.explains == () and plain.replaced_by is None


def test_a_deprecated_rule_needs_no_examples(tmp_path):
    text = GOOD.split("[[example]]")[0].replace('status = "test"', 'status = "deprecated"') \
        .replace("[match]", 'replaced_by = "nccl-new-thing"\n\n[match]')
    rule = parse_rule(write(tmp_path, text))
    assert rule.examples == () and check_rules([rule]) == []


def test_later_folders_override_and_explains_must_name_something(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write(a, GOOD)
    write(b, GOOD.replace('title = "thing on {host}"', 'title = "other title"'))
    rules = load_rules((str(a),), builtin=False, env_dirs=f"{b}::")
    assert [(r.id, r.title) for r in rules] == [("nccl-test-thing", "other title")]
    assert [r.title for r in load_rules((str(b), str(a)), builtin=False)] == ["thing on {host}"]
    builtin = load_rules()
    assert len(builtin) > 50 and [r.id for r in builtin] == sorted(r.id for r in builtin)
    assert len(load_rules((str(a),))) == len(builtin) + 1
    c = tmp_path / "c"
    c.mkdir()
    p = write(c, GOOD.replace("[match]", 'explains = ["nccl-no-such-rule"]\n\n[match]'))
    with pytest.raises(RuleError) as ei:
        load_rules((str(c),), builtin=False)
    assert str(ei.value) == (f"{p}:{_line(p.read_text(), 'explains')}: explains names 'nccl-no-such-rule', which is "
                             "neither a rule id nor a taxonomy id")
    with pytest.raises(RuleError) as ei:
        load_rules((), builtin=False, env_dirs=str(tmp_path / "gone"))
    assert str(ei.value) == f"{tmp_path / 'gone'}: rules folder does not exist"


def test_rule_files_are_sorted_and_hidden_ones_skipped(tmp_path):
    for name in ("b/nccl-b-x.toml", "a/nccl-a-x.toml", "a/.nccl-hidden-x.toml", "a/notes.md"):
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    assert [p.relative_to(tmp_path).as_posix() for p in rule_files(tmp_path)] == ["a/nccl-a-x.toml", "b/nccl-b-x.toml"]
    one = tmp_path / "a" / "nccl-a-x.toml"
    assert rule_files(one) == [one]


def test_a_flat_rules_folder_is_read(tmp_path):
    d = tmp_path / "nccl"  # rule files straight in the folder given: the folder's name is their family
    d.mkdir()
    (d / "nccl-test-thing.toml").write_text(GOOD)
    [rule] = load_rules((str(d),), builtin=False)
    assert (rule.family, rule.id) == ("nccl", "nccl-test-thing")


def test_check_rules_reports_explains_problems_and_crashes(tmp_path):
    selfish = parse_rule(write(tmp_path, GOOD.replace("[match]", 'explains = ["nccl-test-thing", "other"]\n\n[match]')))
    problems = check_rules([selfish])
    line = selfish.line_of("explains")
    assert [str(p) for p in problems] == [
        f"{selfish.path}:{line}: nccl-test-thing: a rule cannot explain itself ('nccl-test-thing')",
        f"{selfish.path}:{line}: nccl-test-thing: a rule cannot explain itself ('other')"]
    lonely = parse_rule(write(tmp_path, GOOD.replace("[match]", 'explains = ["nccl-gone"]\n\n[match]')))
    assert [(p.line, p.message) for p in check_rules([lonely])] == [(lonely.line_of("explains"),
                                                                    "explains unknown id 'nccl-gone'")]
    assert lonely.line_of("explains") > 1
    # a predicate given an argument it does not take crashes the pipeline: reported at the example, not raised
    typo = parse_rule(write(tmp_path, GOOD.replace(
        "[[match.all]]", 'predicates = [{ name = "busid_shared_by_ranks_on_host", hosts = 2 }]\n[[match.all]]')))
    problems = check_rules([typo])
    assert [(p.rule, p.line) for p in problems] == [("nccl-test-thing", typo.examples[0].line)]
    assert problems[0].message.startswith("example crashed the pipeline: TypeError(")
    assert Problem("r", "p.toml", 3, "m").__str__() == "p.toml:3: r: m"
    loose = parse_rule(write(tmp_path, GOOD.replace("node1:1:1 [0] NCCL INFO thing broke",
                                                    "node1:1:1 [0] init.cc:1 NCCL WARN thing broke")))
    [p] = check_rules([loose])
    assert (p.line, p.message) == (loose.examples[1].line, "example expects no-match but the rule matched")


def test_a_users_rule_with_flight_recorder_dump_examples_is_checked_on_its_own(tmp_path):
    # a user adapts the built-in Flight Recorder rule (examples with dumps) under an id of their own: its examples
    # run against that rule (not the built-in set, which does not have it), so they pass
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "rules" / "flight" / "flight-collective-mismatch.toml").read_text()
    assert "dumps" in text
    path = tmp_path / "flight" / "flight-my-mismatch.toml"
    path.parent.mkdir()
    path.write_text(text.replace('id = "flight-collective-mismatch"', 'id = "flight-my-mismatch"'))
    mine = parse_rule(path)
    assert mine.id == "flight-my-mismatch" and any(x.dumps for x in mine.examples)
    assert check_rules([mine]) == []


def test_an_error_in_the_second_selector_is_at_that_selectors_line(tmp_path):
    text = _sub("[fix]", "[[match.all]]\nmsg = '~other'\n\n[fix]")
    second = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() == "[[match.all]]"][1]
    err = _err(tmp_path, text)
    assert str(err) == (f"{err.path}:{second}: match.all[1]: a selector needs 'kind' (a glob such as \"nccl.warn.*\", "
                        "or a list of them)")
