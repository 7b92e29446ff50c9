"""Label and field selectors parse, print, fail and match as kube-apiserver's do."""

from __future__ import annotations

import pytest

from pykubevirt.api.label_selectors import (
    NOTHING,
    LabelSelector,
    SelectorError,
    label_selector_from_dict,
    parse_label_selector,
)
from pykubevirt.apiserver.selectors import FieldSelector, check_fields, escape_field_value, parse_field_selector

# Each selector and the canonical string the Go Selector.String() gives (requirements sorted by key, values sorted).
LABEL_PARSES = [
    ("", ""),
    ("   ", ""),
    ("a=b", "a=b"),
    ("a==b", "a==b"),
    ("a!=b", "a!=b"),
    ("a=", "a="),
    ("a", "a"),
    ("!a", "!a"),
    (" ! a ", "!a"),
    ("x in (b,a)", "x in (a,b)"),
    ("x notin (a)", "x notin (a)"),
    ("x in ()", "x in ()"),
    ("x in (a,)", "x in (,a)"),
    ("x in (,a)", "x in (,a)"),
    ("x in (a,,b)", "x in (,a,b)"),
    ("x in(a , b)", "x in (a,b)"),
    ("x in (in,notin)", "x in (in,notin)"),
    ("z=1,a=2,m", "a=2,m,z=1"),
    ("  a  ==  b ,  c  ", "a==b,c"),
    ("a>1", "a>1"),
    ("a<10", "a<10"),
    ("example.com/name=v", "example.com/name=v"),
    ("kubevirt.io/domain=testvm,vm.kubevirt.io/name", "kubevirt.io/domain=testvm,vm.kubevirt.io/name"),
    ("a.b_c-d=E.f_G-1", "a.b_c-d=E.f_G-1"),
]


@pytest.mark.parametrize(("text", "canonical"), LABEL_PARSES)
def test_label_selector_parses(text: str, canonical: str) -> None:
    assert str(parse_label_selector(text)) == canonical


_QNAME_DETAIL = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_VALUE_DETAIL = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)

LABEL_ERRORS = [
    ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
    ("a=b=c", "found '=', expected: ',' or 'end of string'"),
    ("a=b c", "found 'c', expected: ',' or 'end of string'"),
    ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ("a,", "found '', expected: identifier after ','"),
    ("a,,b", "found ',', expected: identifier after ','"),
    (",a", "found ',', expected: !, identifier, or 'end of string'"),
    ("=a", "found '=', expected: !, identifier, or 'end of string'"),
    ("!", "unable to parse requirement: found '', expected: identifier"),
    ("a in b", "unable to parse requirement: found 'b' expected: '('"),
    ("a in", "unable to parse requirement: found '' expected: '('"),
    ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
    ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
    ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
    ("a=(", "unable to parse requirement: found '(', expected: identifier"),
    ("-a=b", f'unable to parse requirement: <nil>: Invalid value: "-a": {_QNAME_DETAIL}'),
    ("a=-b", f'unable to parse requirement: values[0][a]: Invalid value: "-b": {_VALUE_DETAIL}'),
    (
        "a=" + "v" * 64,
        'unable to parse requirement: values[0][a]: Invalid value: "'
        + "v" * 64
        + '": must be no more than 63 characters',
    ),
    (
        "k" * 64,
        'unable to parse requirement: <nil>: Invalid value: "'
        + "k" * 64
        + '": name part must be no more than 63 characters',
    ),
    (
        "a/b/c",
        'unable to parse requirement: <nil>: Invalid value: "a/b/c": a qualified name must consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
        "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
        "(e.g. 'example.com/MyName')",
    ),
    ("/a", 'unable to parse requirement: <nil>: Invalid value: "/a": prefix part must be non-empty'),
    (
        "Example.com/a",
        'unable to parse requirement: <nil>: Invalid value: "Example.com/a": prefix part a '
        "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    ),
    (
        "a>x",
        'unable to parse requirement: values[0]: Invalid value: "x": '
        "for 'Gt', 'Lt' operators, the value must be an integer",
    ),
]


@pytest.mark.parametrize(("text", "message"), LABEL_ERRORS)
def test_label_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_label_selector(text)
    assert str(caught.value) == message


LABELS = {"app": "web", "tier": "front", "version": "3", "kubevirt.io/domain": "vm1", "empty": ""}

LABEL_MATCHES = [
    ("", True),
    ("app=web", True),
    ("app==web", True),
    ("app=db", False),
    ("missing=x", False),
    ("app!=db", True),
    ("app!=web", False),
    ("missing!=x", True),
    ("app in (web,db)", True),
    ("app in (db)", False),
    ("missing in (x)", False),
    ("app notin (db)", True),
    ("app notin (web)", False),
    ("missing notin (x)", True),
    ("app", True),
    ("missing", False),
    ("!app", False),
    ("!missing", True),
    ("empty=", True),
    ("empty", True),
    ("empty in (,x)", True),
    ("version>2", True),
    ("version>3", False),
    ("version<4", True),
    ("app>1", False),
    ("missing<1", False),
    ("app=web,tier=front", True),
    ("app=web,tier=back", False),
    ("kubevirt.io/domain=vm1", True),
]


@pytest.mark.parametrize(("text", "expected"), LABEL_MATCHES)
def test_label_selector_matches(text: str, expected: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is expected


def test_label_selector_matches_no_labels() -> None:
    assert parse_label_selector("").matches(None)
    assert parse_label_selector("!a,b!=c,d notin (e)").matches(None)
    assert not parse_label_selector("a").matches(None)


def test_label_selector_empty_nothing_and_hashing() -> None:
    assert parse_label_selector("").empty
    assert not parse_label_selector("a").empty
    assert not NOTHING.empty
    assert not NOTHING.matches({})
    assert parse_label_selector("a=b,c") == parse_label_selector("c, a=b")
    assert len({parse_label_selector("a=b"), parse_label_selector(" a = b "), LabelSelector()}) == 2


FROM_DICT = [
    ({}, ""),
    ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["y", "x"]}]}, "a in (x,y)"),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}, "a notin (x)"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, "a"),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, "!a"),
    (
        {"matchLabels": {"kubevirt.io/vm": "x"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
        "b,kubevirt.io/vm=x",
    ),
]


@pytest.mark.parametrize(("selector", "canonical"), FROM_DICT)
def test_label_selector_from_dict(selector: dict[str, object], canonical: str) -> None:
    assert str(label_selector_from_dict(selector)) == canonical


def test_label_selector_from_dict_none_selects_nothing() -> None:
    assert label_selector_from_dict(None) is NOTHING
    assert label_selector_from_dict({}).matches({"a": "b"})


FROM_DICT_ERRORS = [
    ({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, '"Bogus" is not a valid label selector operator'),
    (
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        'values: Invalid value: []string{"x"}: values set must be empty for exists and does not exist',
    ),
    ({"matchLabels": {"-a": "b"}}, f'key: Invalid value: "-a": {_QNAME_DETAIL}'),
    ({"matchLabels": {"a": "b c"}}, f'values[0][a]: Invalid value: "b c": {_VALUE_DETAIL}'),
]


@pytest.mark.parametrize(("selector", "message"), FROM_DICT_ERRORS)
def test_label_selector_from_dict_errors(selector: dict[str, object], message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        label_selector_from_dict(selector)
    assert str(caught.value) == message


# ------------------------------------------------------------------------------------------------- field selectors

FIELD_PARSES = [
    ("", "", set()),
    ("metadata.name=foo", "metadata.name=foo", {"metadata.name"}),
    ("metadata.name==foo", "metadata.name=foo", {"metadata.name"}),
    ("status.phase!=Running", "status.phase!=Running", {"status.phase"}),
    ("b=1,a=2", "a=2,b=1", {"a", "b"}),
    ("a=1,,b=2", "a=1,b=2", {"a", "b"}),
    ("a=", "a=", {"a"}),
    ("a=x\\,y", "a=x\\,y", {"a"}),
    ("a=x\\=y", "a=x\\=y", {"a"}),
    ("a=x\\\\y", "a=x\\\\y", {"a"}),
    ("a==b\\=c", "a=b\\=c", {"a"}),
]


@pytest.mark.parametrize(("text", "canonical", "fields"), FIELD_PARSES)
def test_field_selector_parses(text: str, canonical: str, fields: set[str]) -> None:
    selector = parse_field_selector(text)
    assert str(selector) == canonical
    assert selector.fields() == fields


def test_field_selector_unescapes_values() -> None:
    assert parse_field_selector("a=x\\,y\\=z\\\\").requirements[0].value == "x,y=z\\"
    assert escape_field_value("x,y=z\\") == "x\\,y\\=z\\\\"


FIELD_ERRORS = [
    ("nope", "invalid selector: 'nope'; can't understand 'nope'"),
    ("a=1,nope", "invalid selector: 'a=1,nope'; can't understand 'nope'"),
    ("a=b\\x", "invalid field selector: invalid escape sequence: \\x"),
    ("a=b\\", "invalid field selector: invalid escape sequence: \\"),
    ("a=b=c", "invalid field selector: unescaped character in value: 61"),
]


@pytest.mark.parametrize(("text", "message"), FIELD_ERRORS)
def test_field_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_field_selector(text)
    assert str(caught.value) == message


POD = {
    "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "default"},
    "spec": {"nodeName": "node01", "restartPolicy": "Never"},
    "status": {"phase": "Running", "podIP": "10.244.0.5"},
}
EVENT = {
    "metadata": {"name": "vm1.17a", "namespace": "default"},
    "involvedObject": {"kind": "VirtualMachine", "name": "vm1", "namespace": "default", "uid": "u-1"},
    "reason": "SuccessfulCreate",
    "type": "Normal",
    "source": {"component": "virtualmachine-controller"},
    "reportingController": "kubevirt.io/virt-controller",
}
NODE = {"metadata": {"name": "node01"}, "spec": {"unschedulable": True}}

FIELD_MATCHES = [
    (POD, "", True),
    (POD, "metadata.name=virt-launcher-vm1-abcde", True),
    (POD, "metadata.name=other", False),
    (POD, "metadata.namespace=default,spec.nodeName=node01", True),
    (POD, "spec.nodeName!=node01", False),
    (POD, "status.phase!=Succeeded,status.phase!=Failed", True),
    (POD, "status.nominatedNodeName=", True),
    (POD, "status.nominatedNodeName!=", False),
    (POD, "spec.nodeName=", False),
    (EVENT, "involvedObject.name=vm1,involvedObject.kind=VirtualMachine,involvedObject.uid=u-1", True),
    (EVENT, "involvedObject.name=vm2", False),
    (EVENT, "source=virtualmachine-controller", True),
    (EVENT, "reportingComponent=kubevirt.io/virt-controller", True),
    (EVENT, "type=Warning", False),
    (NODE, "spec.unschedulable=true", True),
    (NODE, "spec.unschedulable=false", False),
    ({"metadata": {"name": "a,b"}}, "metadata.name=a\\,b", True),
]


@pytest.mark.parametrize(("obj", "text", "expected"), FIELD_MATCHES)
def test_field_selector_matches(obj: dict[str, object], text: str, expected: bool) -> None:
    assert parse_field_selector(text).matches(obj) is expected


def test_field_selector_exact_and_hashing() -> None:
    selector = parse_field_selector("metadata.name=vm1,status.phase!=Failed")
    assert selector.exact("metadata.name") == "vm1"
    assert selector.exact("status.phase") is None
    assert selector == parse_field_selector("status.phase!=Failed,metadata.name==vm1")
    assert len({selector, parse_field_selector("status.phase!=Failed,metadata.name=vm1"), FieldSelector()}) == 2
    assert FieldSelector().empty and not selector.empty


def test_check_fields() -> None:
    allowed = {"metadata.name", "metadata.namespace", "spec.nodeName"}
    check_fields(parse_field_selector("metadata.name=a,spec.nodeName=n"), allowed)
    check_fields(parse_field_selector(""), allowed)
    with pytest.raises(SelectorError) as caught:
        check_fields(parse_field_selector("metadata.name=a,spec.color=red"), allowed)
    assert str(caught.value) == "field label not supported: spec.color"
