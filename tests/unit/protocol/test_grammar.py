"""Tests for sparsefs.protocol.grammar: the virtual path name parser."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparsefs.protocol.grammar import (
    ACTIONS_WITH_ARGUMENT,
    ACTIONS_WITHOUT_ARGUMENT,
    CORE_ACTIONS,
    OPTION_KEYS,
    GrammarError,
    VirtualRequest,
    close_actions,
    near_option,
    parse_suffix,
    requested_format,
    split_name,
    split_slots,
)

SLOT_ACTIONS = frozenset({"intent", "collect", "refine", "verify"})
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def error_of(suffix: str, extra: frozenset[str] = frozenset()) -> GrammarError:
    with pytest.raises(GrammarError) as info:
        parse_suffix(suffix, extra)
    return info.value


def existing(*names: str) -> Callable[[str], bool]:
    return frozenset(names).__contains__


# --- constants and types ------------------------------------------------------


def test_action_and_option_constants() -> None:
    assert {"intent", "scout", "focus", "collect", "refine", "verify", "full", "raw"} == CORE_ACTIONS
    assert {"focus", "refine", "verify"} == ACTIONS_WITH_ARGUMENT
    assert {"scout", "full", "raw"} == ACTIONS_WITHOUT_ARGUMENT
    assert {"k", "format", "scope", "budget", "where", "by", "cols", "rows", "sheet", "since", "until"} == OPTION_KEYS


def test_grammar_error_is_value_error_with_message_and_hint() -> None:
    err = GrammarError("bad thing", "do this instead")
    assert isinstance(err, ValueError)
    assert (err.message, err.hint) == ("bad thing", "do this instead")
    assert "bad thing" in str(err) and "do this instead" in str(err)


def test_grammar_error_pickles() -> None:
    err = pickle.loads(pickle.dumps(GrammarError("m", "h")))
    assert (err.message, err.hint) == ("m", "h")


def test_request_is_frozen_and_hashable() -> None:
    req = parse_suffix("intent=x&k=3&format=json")
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.action = "raw"  # type: ignore[misc]
    assert hash(req) == hash(parse_suffix("intent=x&format=json&k=3"))
    assert req == parse_suffix("intent=x&format=json&k=3")
    assert len({req, parse_suffix("intent=x&k=3&format=json")}) == 1


def test_options_mapping_is_read_only() -> None:
    opts = parse_suffix("intent=x&k=3").options
    assert opts == {"k": "3"}
    with pytest.raises(TypeError):
        opts["k"] = "4"  # type: ignore[index]


def test_request_built_directly_with_a_dict_stays_hashable() -> None:
    req = VirtualRequest(action="scout", options={"budget": "5"}, budget=5)
    assert isinstance(hash(req), int)
    assert req.options == {"budget": "5"}
    assert VirtualRequest("scout") == VirtualRequest("scout", None, (), {}, None, "text")


# --- actions -----------------------------------------------------------------


@pytest.mark.parametrize("action", sorted(ACTIONS_WITHOUT_ARGUMENT))
def test_argumentless_actions(action: str) -> None:
    req = parse_suffix(action)
    assert (req.action, req.argument, req.slots) == (action, None, ())
    assert (req.k, req.format, req.budget, req.scope) == (None, "text", None, None)
    assert req.options == {}


@pytest.mark.parametrize("action", sorted(ACTIONS_WITHOUT_ARGUMENT))
def test_argumentless_actions_reject_an_argument(action: str) -> None:
    err = error_of(f"{action}=x")
    assert f"@{action}" in err.message
    assert "@intent=x" in err.hint


@pytest.mark.parametrize("action", sorted(ACTIONS_WITHOUT_ARGUMENT))
def test_argumentless_actions_accept_a_blank_argument(action: str) -> None:
    assert parse_suffix(f"{action}=").argument is None
    assert parse_suffix(f"{action}=%20").argument is None


@pytest.mark.parametrize("action", sorted(ACTIONS_WITHOUT_ARGUMENT))
@pytest.mark.parametrize("tail", ["foo", "S", "x=y", "K=3", "k"])
def test_argumentless_actions_reject_trailing_text(action: str, tail: str) -> None:
    err = error_of(f"{action}&{tail}")
    assert "unknown option" in err.message
    assert "k" in err.hint and "budget" in err.hint


@pytest.mark.parametrize("action", sorted(ACTIONS_WITHOUT_ARGUMENT))
def test_argumentless_actions_take_options(action: str) -> None:
    req = parse_suffix(f"{action}&budget=500&format=json&scope=p1-2&k=7")
    assert (req.budget, req.format, req.scope, req.k) == (500, "json", "p1-2", 7)


@pytest.mark.parametrize("action", sorted(ACTIONS_WITH_ARGUMENT))
@pytest.mark.parametrize("suffix_tail", ["", "=", "=   ", "=%20%09", "&k=3", "=&k=3"])
def test_required_argument_missing(action: str, suffix_tail: str) -> None:
    err = error_of(action + suffix_tail)
    assert err.message == f"@{action} needs an argument"
    assert f"@{action}=" in err.hint


def test_focus_takes_anchor_without_slots() -> None:
    req = parse_suffix("focus=p12-14")
    assert (req.action, req.argument, req.slots) == ("focus", "p12-14", ())
    assert parse_suffix("focus=#Heading; with semicolon").slots == ()


@pytest.mark.parametrize("action", ["collect", "refine", "intent"])
def test_slotted_actions_split_their_argument(action: str) -> None:
    req = parse_suffix(f"{action}=revenue 2023; headcount")
    assert req.action == action
    assert req.argument == "revenue 2023; headcount"
    assert req.slots == ("revenue 2023", "headcount")


def test_a_verify_claim_is_one_slot() -> None:
    claim = "revenue, margin and cash flow increased; staff fell"
    assert parse_suffix(f"verify={claim}").slots == (claim,)


@pytest.mark.parametrize("suffix", ["intent", "intent=", "intent=   ", "intent=%20"])
def test_intent_without_text_is_underspecified(suffix: str) -> None:
    req = parse_suffix(suffix)
    assert (req.action, req.argument, req.slots) == ("intent", None, ())


def test_intent_without_equals_rejects_text_segment() -> None:
    err = error_of("intent&what is revenue")
    assert "unknown option" in err.message
    assert "@intent=" in err.hint


def test_intent_with_empty_head_keeps_text_segments() -> None:
    assert parse_suffix("intent=&S&P").argument == "&S&P"


@pytest.mark.parametrize("suffix", ["foo", "foo=bar", "%69ntent=x", "bogus=x", "notes"])
def test_unknown_action(suffix: str) -> None:
    err = error_of(suffix)
    assert "unknown action" in err.message and "did you mean" not in err.message
    assert "@intent=<what you need>" in err.hint
    for action in CORE_ACTIONS:
        assert f"@{action}" in err.hint


@pytest.mark.parametrize(
    ("suffix", "meant", "fixed"),
    [
        ("intnet=R&D 2023", "@intent", "write @intent=R&D 2023"),
        ("scuot", "@scout", "write @scout"),
        ("summ=population&where=region:EU", "@sum", "write @sum=population&where=region:EU"),
        ("fcous=L1-9", "@focus", "write @focus=L1-9"),
        ("intent =x", "@intent", "write @intent=x"),
        (" intent", "@intent", "write @intent"),
        ("scout@x", "@scout", "write @scout"),
        ("refien=" + "w" * 100, "@refine", "write @refine=<what else you need>"),
    ],
)
def test_an_action_typo_asks_did_you_mean_instead_of_listing_every_action(suffix: str, meant: str,
                                                                           fixed: str) -> None:
    err = error_of(suffix, frozenset({"sum", "count"}))
    assert f"did you mean {meant}" in err.message and err.unknown_action == suffix.split("=")[0]
    assert err.hint == fixed  # the request as it was meant, to copy (its form when that would be long)


def test_close_actions_cover_operations_and_leave_other_words_alone() -> None:
    extra = frozenset({"sum", "count", "mean"})
    assert close_actions("intnet") == ["intent"] and close_actions("summ", extra) == ["sum"]
    assert close_actions("scuot", extra) == ["scout"]
    assert set(close_actions("coutn", extra)) == {"scout", "count"}  # both offered when equally close
    for word in ("old", "v2", "backup", "bogus", "test", "draft", "orig"):
        assert close_actions(word, extra) == [], word


def test_uppercase_action_is_called_out() -> None:
    assert "lowercase" in error_of("Intent=x").message and error_of("INTENT=x").hint == "write @intent=x"
    assert "lowercase" not in error_of("foo").message


def test_error_messages_quote_and_shorten_user_text() -> None:
    err = error_of("x" * 1000 + "=y")
    assert len(err.message) < 80 and "..." in err.message
    assert "\n" not in error_of("bad\naction").message
    assert len(error_of("intent=x&k=" + "9" * 1000).message) < 80


@pytest.mark.parametrize("suffix", ["", "=x", "&k=3"])
def test_empty_action(suffix: str) -> None:
    err = error_of(suffix)
    assert "empty action" in err.message
    assert "@intent=<what you need>" in err.hint


def test_extra_actions_take_optional_argument() -> None:
    extra = frozenset({"sum", "path"})
    req = parse_suffix("sum=revenue&where=region:EU&k=2", extra)
    assert (req.action, req.argument, req.k) == ("sum", "revenue", 2)
    assert req.options["where"] == "region:EU"
    assert req.slots == ()
    assert parse_suffix("path", extra).argument is None
    assert parse_suffix("path=$.items[*].id", extra).argument == "$.items[*].id"


def test_extra_actions_are_listed_in_hint_and_not_accepted_without_opt_in() -> None:
    assert "unknown action" in error_of("sum=revenue").message
    assert "@sum" in error_of("nope", frozenset({"sum"})).hint


def test_extra_actions_do_not_change_core_rules() -> None:
    extra = frozenset({"focus", "scout"})
    assert "needs an argument" in error_of("focus", extra).message
    assert "takes no argument" in error_of("scout=x", extra).message


# --- '&' splitting -------------------------------------------------------------


def test_ampersand_without_known_key_is_text() -> None:
    req = parse_suffix("intent=R&D 2023; headcount&k=3&format=json")
    assert req.argument == "R&D 2023; headcount"
    assert req.slots == ("R&D 2023", "headcount")
    assert (req.k, req.format) == (3, "json")
    assert req.options == {"k": "3", "format": "json"}


def test_options_interleaved_with_text() -> None:
    req = parse_suffix("intent=R&D&k=3&S&P 500")
    assert req.argument == "R&D&S&P 500"
    assert req.k == 3


@pytest.mark.parametrize(
    ("suffix", "argument"),
    [
        ("intent=a&K=3", "a&K=3"),
        ("intent=a&k", "a&k"),
        ("intent=a& k=3", "a& k=3"),
        ("intent=a&kk=3", "a&kk=3"),
        ("intent=a&=3", "a&=3"),
        ("intent=a&", "a&"),
        ("intent=a&&b", "a&&b"),
        ("intent=a&%6B=3", "a&k=3"),
        ("intent=a%26k=3", "a&k=3"),
        ("intent=a%26wher=x=y", "a&wher=x=y"),
        ("intent=a&kb=x", "a&kb=x"),
        ("intent=R&D=spend", "R&D=spend"),
        ("intent=a&wherever=x", "a&wherever=x"),
        ("intent=a&whe re=x", "a&whe re=x"),
    ],
)
def test_segments_that_are_not_options_stay_text(suffix: str, argument: str) -> None:
    req = parse_suffix(suffix)
    assert req.argument == argument
    assert req.options == {}


@pytest.mark.parametrize(
    ("suffix", "meant"),
    [
        ("intent=a&wher=region:EU", "where"),
        ("sum=revenue&wher=region:EU", "where"),
        ("intent=a&scpoe=L1-9", "scope"),
        ("intent=a&formt=json", "format"),
        ("intent=a&fromat=json", "format"),
        ("intent=a&budjet=900", "budget"),
        ("intent=a&Where=x", "where"),
        ("intent=a&SCOPE=p1", "scope"),
        ("intent=a&row=1-9", "rows"),
        ("scout&formt=json", "format"),
    ],
)
def test_a_near_miss_option_is_refused_not_taken_as_text(suffix: str, meant: str) -> None:
    err = error_of(suffix, frozenset({"sum"}))
    assert f"did you mean &{meant}=?" in err.message
    assert f"&{meant}=" in err.hint and "%26" in err.hint  # how to write it, and how to keep an '&' literal


@pytest.mark.parametrize(
    ("key", "near"),
    [("wher", "where"), ("whee", "where"), ("wehre", "where"), ("wheres", "where"), ("k", None), ("K", None),
     ("kk", None), ("by", None), ("By", "by"), ("D", None), ("where", None), ("cool", None), ("loss", None),
     ("rose", None), ("sinc", "since"), ("untill", "until"), ("sheets", "sheet"), ("é", None), ("%6B", None)],
)
def test_near_option(key: str, near: str | None) -> None:
    assert near_option(key) == near


@pytest.mark.parametrize(
    ("suffix", "fmt"),
    [("intnet=a&format=json", "json"), ("intent=a&formt=json", "json"), ("intent=a&k=x&format=%6Ason", "json"),
     ("intent=a&format=jsn", "text"), ("intent=a&format=%ZZ", "text"), ("intent=a", "text"),
     ("intent=a&format=verbose", "verbose"), ("format=json", "text")],
)
def test_requested_format_is_read_even_from_a_request_that_does_not_parse(suffix: str, fmt: str) -> None:
    assert requested_format(suffix) == fmt


@pytest.mark.parametrize("key", sorted(OPTION_KEYS))
def test_duplicate_option(key: str) -> None:
    value = {"k": "3", "format": "json", "scope": "p1", "budget": "9"}.get(key, "x")
    err = error_of(f"intent=x&{key}={value}&{key}={value}")
    assert "twice" in err.message and key in err.message


def test_argument_keeps_equals_signs() -> None:
    assert parse_suffix("intent=a=b").argument == "a=b"
    assert parse_suffix("focus=$.x==1").argument == "$.x==1"
    assert parse_suffix("verify=E=mc2&k=1").argument == "E=mc2"


# --- percent-decoding ---------------------------------------------------------


@pytest.mark.parametrize(
    ("encoded", "decoded"),
    [
        ("a%2Fb", "a/b"),
        ("a%2fb", "a/b"),
        ("50%25", "50%"),
        ("a+b", "a+b"),
        ("a%2Bb", "a+b"),
        ("a%20b", "a b"),
        ("caf%C3%A9", "café"),
        ("café", "café"),
        ("%26", "&"),
        ("x%3Dy", "x=y"),
        ("%F0%9F%93%88 up", "📈 up"),
    ],
)
def test_percent_decoding(encoded: str, decoded: str) -> None:
    assert parse_suffix("intent=" + encoded).argument == decoded


@pytest.mark.parametrize(
    "bad",
    ["%zz", "%4", "%", "50%", "%4g", "a%%41", "%ff", "%C3", "%ED%A0%80", "%C3x%A9"],
)
def test_malformed_percent(bad: str) -> None:
    err = error_of("intent=" + bad)
    assert "%25" in err.hint


@pytest.mark.parametrize(
    "suffix",
    ["intent=x&scope=%zz", "intent=x&k=%4", "scout&scope=%ff", "full&format=%"],
)
def test_malformed_percent_in_option_values(suffix: str) -> None:
    assert "%25" in error_of(suffix).hint


def test_option_values_are_decoded() -> None:
    req = parse_suffix("intent=x&k=%31%30&scope=sheet%3ASales%2F2023&format=%6Ason")
    assert (req.k, req.scope, req.format) == (10, "sheet:Sales/2023", "json")
    assert req.options == {"k": "10", "scope": "sheet:Sales/2023", "format": "json"}


@pytest.mark.parametrize(
    "suffix",
    ["intent=\udcff", "\udcffintent", "intent=x&scope=\udc80", "intent=%41\ud800"],
)
def test_lone_surrogates_are_grammar_errors(suffix: str) -> None:
    err = error_of(suffix)
    assert "UTF-8" in err.message


def test_argument_is_stripped() -> None:
    assert parse_suffix("intent=%20 hello\t%0A").argument == "hello"
    assert parse_suffix("collect=  a ;  b  ").slots == ("a", "b")


# --- option values ---------------------------------------------------------------


@pytest.mark.parametrize(("value", "k"), [("1", 1), ("50", 50), ("07", 7), ("%203%20", 3)])
def test_k_valid(value: str, k: int) -> None:
    assert parse_suffix(f"intent=x&k={value}").k == k


@pytest.mark.parametrize("value", ["0", "51", "-1", "+3", "3.0", "abc", "", "1_0", "٣", "9" * 5000])
def test_k_invalid(value: str) -> None:
    err = error_of(f"intent=x&k={value}")
    assert "k" in err.message and "1 to 50" in err.hint


@pytest.mark.parametrize(("value", "budget"), [("1", 1), ("10000000", 10_000_000)])
def test_budget_valid(value: str, budget: int) -> None:
    assert parse_suffix(f"scout&budget={value}").budget == budget


@pytest.mark.parametrize("value", ["0", "10000001", "-5", "1e3", "", "x"])
def test_budget_invalid(value: str) -> None:
    err = error_of(f"scout&budget={value}")
    assert "budget" in err.message and "10,000,000" in err.hint


@pytest.mark.parametrize("value", ["text", "json"])
def test_format_valid(value: str) -> None:
    assert parse_suffix(f"intent=x&format={value}").format == value


@pytest.mark.parametrize("value", ["JSON", "xml", "", "jsonl"])
def test_format_invalid(value: str) -> None:
    err = error_of(f"intent=x&format={value}")
    assert "format" in err.message and "json" in err.hint


def test_format_defaults_to_text() -> None:
    assert parse_suffix("raw").format == "text"
    assert "format" not in parse_suffix("raw").options


@pytest.mark.parametrize("value", ["p10-20", "L1-400", "sheet:Sales", "$.data.items"])
def test_scope_valid(value: str) -> None:
    assert parse_suffix(f"intent=x&scope={value}").scope == value


@pytest.mark.parametrize("value", ["", "%20", "%09"])
def test_scope_empty(value: str) -> None:
    assert "scope" in error_of(f"intent=x&scope={value}").message


# --- split_slots ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "slots"),
    [
        ("a; b;c", ("a", "b", "c")),
        ("a;; ;b;", ("a", "b")),
        ("just one", ("just one",)),
        ("1) a 2) b", ("a", "b")),
        ("1. a 2. b", ("a", "b")),
        ("(1) a (2) b", ("a", "b")),
        ("Q1: a Q2: b", ("a", "b")),
        ("q1: a q2: b q3: c", ("a", "b", "c")),
        ("1) a; 2) b", ("a", "b")),
        ("1) a; c 2) b", ("a", "c", "b")),
        ("revenue; 1) EU 2) US", ("revenue", "EU", "US")),
        ("For 2023: 1) revenue 2) staff", ("For 2023: revenue", "For 2023: staff")),
        ("1. growth in v2.5 2. churn", ("growth in v2.5", "churn")),
        ("(1) see 1) here (2) there", ("see 1) here", "there")),
        (
            " ".join(f"{i}) q{i}" for i in range(1, 12)),
            tuple(f"q{i}" for i in range(1, 12)),
        ),
        ("1)a;2)b", ("a", "b")),
    ],
)
def test_split_slots(text: str, slots: tuple[str, ...]) -> None:
    assert split_slots(text) == slots


@pytest.mark.parametrize(
    "text",
    [
        "version 2.5 of table 3",
        "table 3",
        "compare 2) and 3)",
        "1) only one",
        "1) a 3) b",
        "2) a 1) b",
        "1) a 1) b",
        "compare table 1) and table 2)",
        "x(1) a x(2) b",
        "see fig.1) a fig.2) b",
        "1.5 a 2.5 b",
        "page 1. 2. done",
        "１) a ２) b",
    ],
)
def test_split_slots_does_not_split_ordinary_numbers(text: str) -> None:
    assert split_slots(text) == (text.strip(),)


def test_split_slots_blank_and_separator_only() -> None:
    assert split_slots("") == ()
    assert split_slots("   ") == ()
    assert split_slots(" ; ; ") == ("; ;",)


# --- split_name ------------------------------------------------------------------


def test_existing_name_is_real() -> None:
    assert split_name("a@scout", existing("a@scout", "a")) is None


def test_real_name_with_at_wins_over_shorter_base() -> None:
    got = split_name("a@b@scout", existing("a@b", "a"))
    assert got == ("a@b", parse_suffix("scout"))


def test_shorter_base_when_longer_prefix_missing() -> None:
    with pytest.raises(GrammarError, match="unknown action"):
        split_name("a@b@scout", existing("a"))


def test_intent_text_may_contain_at() -> None:
    got = split_name("report.txt@intent=mail bob@x.com", existing("report.txt"))
    assert got is not None
    base, req = got
    assert base == "report.txt"
    assert (req.action, req.argument) == ("intent", "mail bob@x.com")


def test_exists_is_probed_right_to_left() -> None:
    calls: list[str] = []

    def probe(name: str) -> bool:
        calls.append(name)
        return name == "x"

    got = split_name("x@intent=a@b", probe)
    assert got == ("x", parse_suffix("intent=a@b"))
    assert calls == ["x@intent=a@b", "x@intent=a", "x"]


def test_no_base_is_none() -> None:
    assert split_name("missing@intent=x", existing("other")) is None
    assert split_name("plain", existing("other")) is None
    assert split_name("", existing("other")) is None


def test_empty_base_is_never_used() -> None:
    assert split_name("@scout", existing("")) is None
    assert split_name("@@scout", existing("", "@")) == ("@", parse_suffix("scout"))


def test_grammar_error_propagates_from_split_name() -> None:
    with pytest.raises(GrammarError, match="needs an argument") as raised:
        split_name("a.pdf@focus", existing("a.pdf"))
    assert raised.value.base == "a.pdf"  # the file the refused request was about (its kind in the stats)


def test_split_name_decodes_slash_and_passes_extra_actions() -> None:
    got = split_name("t.csv@sum=a%2Fb", existing("t.csv"), frozenset({"sum"}))
    assert got == ("t.csv", parse_suffix("sum=a/b", frozenset({"sum"})))


def test_split_name_trailing_at_gives_empty_action_error() -> None:
    with pytest.raises(GrammarError, match="empty action"):
        split_name("a.txt@", existing("a.txt"))


# --- property tests ---------------------------------------------------------------

ANY_CHAR = st.characters(exclude_categories=())  # includes lone surrogates
PIECES = st.sampled_from(
    sorted(CORE_ACTIONS)
    + sorted(OPTION_KEYS)
    + [
        "=",
        "&",
        "%",
        "%2",
        "%25",
        "%2F",
        "%C3%A9",
        "%ff",
        "@",
        ";",
        "1)",
        "2)",
        "1. ",
        "2. ",
    ]
    + ["(1)", "(2)", "Q1:", "Q2:", " ", "50", "json", "text", "0", "\udcff", "é", "sum"]
)
SUFFIXES = st.one_of(
    st.text(ANY_CHAR, max_size=60),
    st.lists(PIECES, max_size=12).map("".join),
    st.tuples(st.sampled_from(sorted(CORE_ACTIONS)), st.lists(PIECES, max_size=10)).map(
        lambda t: t[0] + "=" + "".join(t[1])
    ),
)


def check_request(req: VirtualRequest, extra: frozenset[str]) -> None:
    assert req.action in CORE_ACTIONS | extra
    assert req.argument is None or (req.argument and req.argument == req.argument.strip())
    assert req.k is None or 1 <= req.k <= 50
    assert req.budget is None or 1 <= req.budget <= 10_000_000
    assert req.format in ("text", "json")
    assert req.scope is None or req.scope
    assert set(req.options) <= OPTION_KEYS
    assert bool(req.slots) == (req.argument is not None and req.action in SLOT_ACTIONS)
    hash(req)


@FUZZ
@given(SUFFIXES)
def test_fuzz_parse_suffix_only_raises_grammar_error(suffix: str) -> None:
    extra = frozenset({"sum"})
    try:
        req = parse_suffix(suffix, extra)
    except GrammarError as err:
        assert err.message and err.hint
        err.message.encode("utf-8")  # safe to put in an error pack
        err.hint.encode("utf-8")
    else:
        check_request(req, extra)


@FUZZ
@given(st.text(st.characters(codec="utf-8"), max_size=80))
def test_fuzz_intent_round_trip(text: str) -> None:
    req = parse_suffix("intent=" + quote(text, safe=""))
    assert req.argument == (text.strip() or None)
    assert req.slots == (split_slots(text.strip()) if text.strip() else ())


@FUZZ
@given(st.text(st.characters(codec="utf-8"), min_size=1, max_size=80))
def test_fuzz_slots_are_stripped_non_empty_substrings(text: str) -> None:
    slots = split_slots(text)
    assert bool(slots) == bool(text.strip())
    for slot in slots:
        assert slot and slot == slot.strip()


NAMES = st.lists(st.one_of(PIECES, st.sampled_from(["a", "b.txt", "@", "@@"])), max_size=10).map("".join) | st.text(
    ANY_CHAR, max_size=30
)


@FUZZ
@given(NAMES, st.sets(st.integers(0, 40), max_size=5), st.booleans())
def test_fuzz_split_name(name: str, cut_points: set[int], whole_exists: bool) -> None:
    real = {name[:i] for i in cut_points} | ({name} if whole_exists else set())
    try:
        got = split_name(name, real.__contains__, frozenset({"sum"}))
    except GrammarError:
        return
    if got is None:
        at_bases = [name[:i] for i, c in enumerate(name) if c == "@" and i > 0]
        assert name in real or not any(b in real for b in at_bases)
        return
    base, req = got
    assert name not in real and base in real and base
    assert name.startswith(base + "@")
    longer = [name[:i] for i, c in enumerate(name) if c == "@" and i > len(base)]
    assert not any(b in real for b in longer)
    check_request(req, frozenset({"sum"}))


# --- split_slots: conjunction lists ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "slots"),
    [
        ("revenue, net income and headcount", ("revenue", "net income", "headcount")),
        ("revenue, net income, and headcount", ("revenue", "net income", "headcount")),
        ("revenue, net income or headcount", ("revenue", "net income", "headcount")),
        ("revenue, margin as well as cash flow", ("revenue", "margin", "cash flow")),
        ("revenue, margin, capex and cash flow", ("revenue", "margin", "capex", "cash flow")),
        (
            "Compare revenue, margin and cash flow for 2023",
            ("revenue for 2023", "margin for 2023", "cash flow for 2023"),
        ),
        (
            "What were the revenue, margin and cash flow?",
            ("What were the revenue?", "What were the margin?", "What were the cash flow?"),
        ),
        (
            "Show me revenue, margin, and headcount in Europe",
            ("revenue in Europe", "margin in Europe", "headcount in Europe"),
        ),
        ("For 2023: revenue, margin and staff", ("For 2023: revenue", "For 2023: margin", "For 2023: staff")),
        (
            "revenue, margin and cash flow for 2023 and 2024",
            ("revenue for 2023 and 2024", "margin for 2023 and 2024", "cash flow for 2023 and 2024"),
        ),
        # a first item with its own "and" reads like "fishing and tourism, oil and gas": not split
        ("profit and loss, revenue and margin", ("profit and loss, revenue and margin",)),
        (
            "revenue, margin and headcount growth over the last three years",
            tuple(f"{item} over the last three years" for item in ("revenue", "margin", "headcount growth")),
        ),
        ("R&D, SG&A and capex", ("R&D", "SG&A", "capex")),
        ('"net sales", revenue and income', ('"net sales"', "revenue", "income")),
        # ambiguous; the rule shares what precedes the first item's last preposition
        ("sales of 1,000 units, returns and refunds", ("sales of 1,000 units", "sales of returns", "sales of refunds")),
        # ';' and numbered slots first; the list rule then applies inside each slot
        ("staff; revenue, margin and cash flow", ("staff", "revenue", "margin", "cash flow")),
        (
            "For 2023: 1) revenue, margin and cash flow 2) staff",
            ("For 2023: revenue", "For 2023: margin", "For 2023: cash flow", "For 2023: staff"),
        ),
        ("1) EU revenue 2) rent, utilities and wages", ("EU revenue", "rent", "utilities", "wages")),
    ],
)
def test_split_slots_conjunction_lists(text: str, slots: tuple[str, ...]) -> None:
    assert split_slots(text) == slots


@pytest.mark.parametrize(
    "text",
    [
        "profit and loss",
        "terms and conditions",
        "R&D and headcount",
        "revenue, and margin",
        "revenue and margin or cost",
        "revenue of 1,000,000 and 2,000",
        "1,000, 2,000 and 3,000",
        '"revenue, margin and cash flow"',
        "\u201crevenue, margin and cash flow\u201d",
        "'revenue, margin and cash flow'",
        "In 2023, revenue and margin",
        "In 2023, 2024 and 2025",
        "revenue, margin, cash flow",
        "We saw revenue, margin and cash flow improve as costs fell and demand rose sharply",
        "When revenue fell, the margin shrank and cash flow weakened",
        "the U.S. market, the EU and Asia",
        "net income, see note 3. Margins and cash",
    ],
)
def test_split_slots_keeps_non_lists_whole(text: str) -> None:
    assert split_slots(text) == (text,)


def test_split_slots_list_rule_only_within_slots() -> None:
    # the ';' slot stays whole when its commas are prose; the other slot still splits
    prose = "when revenue fell in the second half of the year, margins shrank and cash flow weakened"
    assert split_slots(f"{prose}; rent, utilities and wages") == (prose, "rent", "utilities", "wages")


def test_parse_suffix_gives_list_slots() -> None:
    req = parse_suffix("intent=R&D, SG&A and capex for 2023&k=3")
    assert req.argument == "R&D, SG&A and capex for 2023"
    assert req.slots == ("R&D for 2023", "SG&A for 2023", "capex for 2023")
    assert req.k == 3


LIST_WORDS = st.sampled_from(["revenue", "net income", "cash flow", "staff", "R&D", "EBITDA", "margin"])


@FUZZ
@given(st.lists(LIST_WORDS, min_size=3, max_size=6, unique=True), st.sampled_from(["and", "or", "as well as"]),
       st.booleans())
def test_fuzz_lists_give_one_slot_per_item(items: list[str], conj: str, oxford: bool) -> None:
    text = ", ".join(items[:-1]) + ("," if oxford else "") + f" {conj} {items[-1]}"
    assert split_slots(text) == tuple(items)
    assert split_slots(f"Compare {text} for 2023") == tuple(f"{item} for 2023" for item in items)
