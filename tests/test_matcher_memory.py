"""The matcher's memory bounds that must not change any result: a job-grouped rule whose ``none`` selector matched
drops what it held and takes no more events; matches that captured nothing share one tuple per event."""
from __future__ import annotations

from nccl_analyzer.analysis import Analyzer, lines_of_text
from nccl_analyzer.engine import parse_rule
from nccl_analyzer.engine.run import _NO_CAPS

from test_engine import GOOD, write

# the WARN is a match; a later "all good" INFO line of any process cancels the rule for the whole job
JOB_NONE = GOOD.replace("[[match.all]]", '[[match.none]]\nkind = "nccl.info"\nmsg = "~all good"\n\n[[match.all]]')
WARNS = "".join(f"a:{p}:{p} [0] init.cc:1 NCCL WARN thing broke\n" for p in range(1, 30))


def _feed(rules, text):
    a = Analyzer(rules=rules)
    for ln in lines_of_text(text):
        a.feed(ln)
    return a


def _kept(a):
    return sum(len(v) for st in a.matcher._states for sl in st.slots for v in sl.by_key.values())


def test_a_cancelled_job_rule_keeps_one_event_and_never_hits(tmp_path):
    rules = [parse_rule(write(tmp_path, JOB_NONE))]
    a = _feed(rules, WARNS)
    assert _kept(a) == 29 and [h.rule.id for h in a.hits()] == ["nccl-test-thing"]
    a = _feed(rules, WARNS + "a:1:1 [0] NCCL INFO all good\n" + WARNS)
    assert _kept(a) == 1, "the none match only: the WARNs before it are dropped, the ones after not taken"
    assert a.hits() == []
    assert a.finish().root_cause.rule != "nccl-test-thing"


def test_a_rank_grouped_rule_is_not_cancelled_for_other_ranks(tmp_path):
    rules = [parse_rule(write(tmp_path, JOB_NONE.replace("[match]", '[match]\ngroup_by = "rank"')))]
    log = ("a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 10 - Init START\n"
           "a:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 20 - Init START\n"
           "a:1:1 [0] init.cc:1 NCCL WARN thing one\n"
           "a:2:2 [1] NCCL INFO all good\n"
           "a:2:2 [1] init.cc:1 NCCL WARN thing two\n")
    a = _feed(rules, log)
    assert [h.ranks for h in a.hits()] == [(0,)]
    assert not a.matcher._states[0].dead


def test_matches_without_captures_share_one_item(tmp_path):
    two = GOOD.replace("msg = '~thing (?P<what>\\w+)'", "msg = '~thing'") + \
        '\n[[match.any]]\nkind = "nccl.warn.*"\n'
    two = two.replace("[fix]", '[[match.any]]\nkind = "nccl.warn.*"\nmsg = "~broke"\n\n[fix]')
    a = _feed([parse_rule(write(tmp_path, two))], "a:1:1 [0] init.cc:1 NCCL WARN thing broke\n")
    slots = [sl for st in a.matcher._states for sl in st.slots if sl.held]
    assert len(slots) >= 2 and all(sl.caps is None and sl.held[0] is slots[0].held[0] for sl in slots)
    items = [it for sl in slots for v in sl.by_key.values() for it in v]
    assert all(it[2] is _NO_CAPS for it in items), "read back with the one shared empty dict"


def test_captures_are_kept_as_names_and_values_and_read_back_as_the_dict(tmp_path):
    text = "".join(f"a:{p}:{p} [0] init.cc:1 NCCL WARN thing broke{p}\n" for p in (1, 2))
    a = _feed([parse_rule(write(tmp_path, GOOD))], text)
    sl = next(sl for st in a.matcher._states for sl in st.slots if sl.held)
    assert sl.caps[0][0] is sl.caps[1][0] == ("what",), "one names tuple for every match with the same captures"
    assert [it[2] for it in sl.items] == [{"what": "broke1"}, {"what": "broke2"}]


def test_a_packed_event_reads_as_the_event_it_packs():
    from nccl_analyzer.packed import PackedEvent, pack
    from nccl_analyzer.model import Event

    ev = Event("torch.terminate", "x.log", 7, "terminate called", host="h", pid=3, rank=2, end_line=9,
               fields={"lines": ["terminate called", "  what():  boom"], "what": "boom", "seq": 5, "ok": None})
    p = pack(ev)
    assert isinstance(p, PackedEvent) and p.unpacked() == ev and p.fields == ev.fields
    assert list(p.fields) == list(ev.fields), "the fields' order (bound values follow it) is kept"
    for name in ("kind", "path", "line", "text", "host", "pid", "tid", "rank", "end_line", "seq", "ok", "what", "nope"):
        assert p.get(name, "dflt") == ev.get(name, "dflt")
    assert p.loc == ev.loc
    assert pack(Event("x", "p", 1, "t")).__class__ is Event, "nothing to pack: the event itself"


def test_late_matches_of_a_slot_are_packed_with_the_same_result(tmp_path):
    from nccl_analyzer.packed import FULL_KEEP, PackedEvent

    rules = [parse_rule(write(tmp_path, GOOD))]
    text = "".join(f"a:{p}:{p} [0] init.cc:1 NCCL WARN thing broke\n" for p in range(1, FULL_KEEP + 20))
    a = _feed(rules, text)
    held = [it[1] for st in a.matcher._states for sl in st.slots for v in sl.by_key.values() for it in v]
    assert sum(isinstance(e, PackedEvent) for e in held) == 19 and not isinstance(held[0], PackedEvent)
    d = a.finish()
    assert d.root_cause.rule == "nccl-test-thing" and d.root_cause.fix.summary == "fix broke"


def test_events_waiting_behind_an_open_traceback_come_out_the_same_packed(monkeypatch):
    from nccl_analyzer import classify

    # rank 1's traceback stays open (its process may still print a chained one): every later event waits
    text = ("[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/app/train.py", line 3, in <module>\n'
            "[rank1]: RuntimeError: boom\n"
            + "".join(f"[rank{r}]:[E1129 15:22:25.400782314 ProcessGroupNCCL.cpp:689] [Rank {r}] Watchdog caught "
                      f"collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, "
                      f"Timeout(ms)=1000) ran for 1001 milliseconds before timing out.\n" for r in range(2, 40))
            + "".join(f"h:{p}:{p} [0] init.cc:1 NCCL WARN thing {p}\n" for p in range(40)))

    def events(hold: int) -> list:
        monkeypatch.setattr(classify, "HOLD_PACK", hold)
        es = classify.EventStream(keep_text=False, compact=True)
        out = []
        for ln in lines_of_text(text):
            out.extend(es.feed(ln))
        from nccl_analyzer.packed import PackedEvent
        waited = (len(es._held), sum(isinstance(h[2], PackedEvent) for h in es._held))
        return out + es.flush(), waited

    whole, waited = events(10 ** 9)
    packed, waited_packed = events(0)
    assert waited[0] > 70 and waited[1] == 0 and waited_packed == (waited[0], waited[0])
    assert packed == whole and all(type(e) is type(w) for e, w in zip(packed, whole))


def test_packed_events_of_one_kind_deflate_against_the_first_ones_pickle():
    # every rank prints the same line with other numbers in it: what is left of the second one is mostly its numbers
    from nccl_analyzer.model import Event
    from nccl_analyzer.packed import _DICTS, pack

    def ev(r: int) -> Event:
        text = f"[rank{r}]:[E1129 15:22:31.80305{r:04d} ProcessGroupNCCL.cpp:2636] [PG ID 0 PG GUID 0(default_pg) " \
               f"Rank {r}] First PG on this rank to signal dumping."
        return Event("test.packed.kind", "x.log", 100 + r, text, rank=r, time=f"1129 15:22:31.{r:06d}",
                     fields={"msg": text[50:], "pg_rank": str(r), "lines": [text, "  more"], "n": r})

    first, second = pack(ev(1)), pack(ev(2))
    assert first._zdict is second._zdict is _DICTS["test.packed.kind"]
    assert len(second._blob) < len(second.text) // 3, "deflated against the first event's pickle"
    for p, r in ((first, 1), (second, 2)):
        e = ev(r)
        assert p.text == e.text and p.time == e.time and p.fields == e.fields and p.unpacked() == e
        assert p.fields is not p.fields, "a new dict every time it is read (a reader may change it)"
    assert pack(Event("x", "p", 1, "t" * 63)).__class__ is Event
    assert pack(Event("x", "p", 1, "t" * 64)).text == "t" * 64, "a long text alone is packed too"


def test_a_slot_reads_its_matches_grouped_by_key_in_first_match_order(tmp_path):
    # ranks log round robin: the slot keeps one flat list, evaluation reads it grouped by process as before
    text = "".join(f"a:{p}:{p} [0] init.cc:1 NCCL WARN thing broke {i}\n" for i in range(3) for p in (7, 3, 5))
    a = _feed([parse_rule(write(tmp_path, GOOD))], text)
    sl = next(sl for st in a.matcher._states for sl in st.slots if sl.items)
    assert list(sl.keys.items()) == [(("a", 7), 3), (("a", 3), 3), (("a", 5), 3)]
    grouped = sl.by_key
    assert list(grouped) == list(sl.keys)
    assert [[it[1].line for it in v] for v in grouped.values()] == [[1, 4, 7], [2, 5, 8], [3, 6, 9]]
    assert [it[0] for it in sl.items] == sorted(it[0] for it in sl.items)


def test_a_match_only_none_slots_keep_is_held_without_its_text(tmp_path):
    """A ``none`` match is read for its group, rank and path only (engine/slot.py ``none_record``): held without its
    text and fields, it cancels the same groups as the whole event did."""
    for scope in ("job", "rank"):
        rule = JOB_NONE.replace("[match]", f'[match]\ngroup_by = "rank"\nnone_scope = "{scope}"')
        a = _feed([parse_rule(write(tmp_path, rule))],
                  "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 10 - Init START\n"
                  "a:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 busId 20 - Init START\n"
                  "a:2:2 [1] NCCL INFO all good, " + "x" * 300 + "\n"
                  "a:1:1 [0] init.cc:1 NCCL WARN thing one\n"
                  "a:2:2 [1] init.cc:1 NCCL WARN thing two\n")
        none = next(sl for st in a.matcher._states for sl in st.slots if sl.part == "none")
        kept = none.held[0]
        assert (kept.kind, kept.line, kept.host, kept.pid, kept.text, kept.fields) == ("nccl.info", 3, "a", 2, "", {})
        assert [h.ranks for h in a.hits()] == [(0,)], scope


def test_a_match_an_all_slot_keeps_too_is_held_whole(tmp_path):
    both = JOB_NONE.replace('[[match.none]]\nkind = "nccl.info"\nmsg = "~all good"',
                            '[[match.none]]\nkind = "nccl.warn.*"\nmsg = "~never"')
    a = _feed([parse_rule(write(tmp_path, both.replace("[match]", '[match]\ngroup_by = "rank"')))],
              "a:1:1 [0] init.cc:1 NCCL WARN thing broke, never mind\n")
    held = [sl.held[0] for st in a.matcher._states for sl in st.slots if sl.held]
    assert len(held) == 2 and held[0] is held[1] and held[0].text.endswith("never mind")


def test_key_counts_read_as_the_dict_they_replace():
    """engine/slot.py ``KeyCounts``: a dict, then a byte per key index once dense (and back when a far index comes):
    the same counts, length and first-match order as a plain dict after any sequence of new keys and increments."""
    import random

    from nccl_analyzer.engine.slot import CAP_PER_KEY, DENSE_FROM, KeyCounts

    rng = random.Random(10)
    for spread in (1, 3, 50, 10_000):
        kc, d = KeyCounts(), {}
        for step in range(3000):
            # the upper half first, then below it (the bytearray grows down), then now and then a far index
            lo = 200 * spread if step < 1000 else 0
            kid = rng.randrange(lo, 400 * spread) if step < 1500 or step % 97 else rng.randrange(0, 10 ** 6)
            if kid in d:
                if d[kid] < CAP_PER_KEY:
                    d[kid] += 1
                    kc[kid] += 1
            else:
                d[kid] = 0
                kc[kid] = 0
            if step % 500 == 0:
                assert list(kc.items()) == list(d.items()) and len(kc) == len(d)
        assert list(kc) == list(d) and list(kc.items()) == list(d.items()) and len(kc) == len(d)
        assert all(kc.get(k) == d.get(k) for k in range(0, 400 * spread, max(1, spread // 2)))
        assert kc.get(-5) is None and kc.get(10 ** 7, "x") == "x"
    dense = KeyCounts()
    for k in range(DENSE_FROM):
        dense[k] = 1
    assert dense._d is None, "close key indexes become a bytearray"
    kc.clear()
    assert len(kc) == 0 and list(kc) == []
