"""Quantities parse, compare and print as Kubernetes' resource.Quantity does."""

from __future__ import annotations

import pytest

from pykubevirt.api.quantity import Quantity, QuantityError, canonical

CANONICAL = [
    ("0", "0"),
    ("0n", "0"),
    ("0Ki", "0"),
    ("2", "2"),
    ("1024", "1024"),
    ("1000", "1k"),
    ("10000", "10k"),
    ("1000000", "1M"),
    ("1.5", "1500m"),
    ("0.5", "500m"),
    ("0.1", "100m"),
    (".5", "500m"),
    ("100m", "100m"),
    ("1000m", "1"),
    ("1001m", "1001m"),
    ("500m", "500m"),
    ("0.1m", "100u"),
    ("1n", "1n"),
    ("0.1n", "1n"),
    ("0.0000000001", "1n"),
    ("1Ki", "1Ki"),
    ("128Mi", "128Mi"),
    ("1Gi", "1Gi"),
    ("1.5Gi", "1536Mi"),
    ("3.5Gi", "3584Mi"),
    ("1024Mi", "1Gi"),
    ("1025Mi", "1025Mi"),
    ("1000Mi", "1000Mi"),
    ("0.5Gi", "512Mi"),
    ("0.5Mi", "512Ki"),
    ("1.1Ki", "1126400m"),
    ("1e3", "1e3"),
    ("12e6", "12e6"),
    ("1E6", "1e6"),
    ("1e-3", "1e-3"),
    ("-1", "-1"),
    ("-100m", "-100m"),
    ("-1Gi", "-1Gi"),
    ("1E", "1E"),
    ("1.G", "1G"),
    ("+5", "5"),
]


@pytest.mark.parametrize(("text", "expected"), CANONICAL)
def test_canonical_form(text: str, expected: str) -> None:
    assert canonical(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1 Gi", "1i", "1Kib", "1.0.0", "Gi", "1m3", "--1", "1e", "0x10"])
def test_malformed_quantities_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError):
        Quantity.parse(text)


def test_numbers_from_json_parse_like_strings() -> None:
    assert str(Quantity.parse(2)) == "2"
    assert str(Quantity.parse(0.5)) == "500m"
    with pytest.raises(QuantityError):
        Quantity.parse(True)


def test_binary_and_decimal_suffixes_differ() -> None:
    assert Quantity.parse("1Ki").value == 1024
    assert Quantity.parse("1k").value == 1000
    assert Quantity.parse("1Mi") > Quantity.parse("1M")
    assert Quantity.parse("1Gi") > Quantity.parse("1000Mi")


def test_equal_amounts_compare_equal_whatever_the_spelling() -> None:
    assert Quantity.parse("1") == Quantity.parse("1000m")
    assert Quantity.parse("1Gi") == Quantity.parse("1024Mi")
    assert Quantity.parse("2Gi") == Quantity.parse("2147483648")
    assert sorted([Quantity.parse("1Gi"), Quantity.parse("500Mi"), Quantity.parse("1G")]) == [
        Quantity.parse("500Mi"),
        Quantity.parse("1G"),
        Quantity.parse("1Gi"),
    ]


def test_arithmetic_keeps_the_left_format() -> None:
    total = Quantity.parse("1Gi") + Quantity.parse("290Mi")
    assert str(total) == "1314Mi"
    assert str(Quantity.parse("1") - Quantity.parse("100m")) == "900m"
    assert str(Quantity.parse("128Mi") * 2) == "256Mi"


def test_integer_views_round_up() -> None:
    assert Quantity.parse("1500m").ceil_int() == 2
    assert Quantity.parse("2").ceil_int() == 2
    assert Quantity.parse("100m").milli() == 100
    assert Quantity.parse("1.5").milli() == 1500


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e1000000", "quantity is larger than 10^1000"),
        ("1" + "0" * 999 + "e2", "quantity is larger than 10^1000"),
        ("9" * 5000, "quantity has more than 1000 significant digits"),
        ("1e3000000000", "unable to parse quantity's suffix"),
    ],
)
def test_absurd_quantities_are_rejected_at_once(text: str, message: str) -> None:
    # Each would take an exact-fraction parser seconds to hours, or overflow Python's int conversion limit.
    with pytest.raises(QuantityError) as raised:
        Quantity.parse(text)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1e-1000000", "1e-9"), ("-1e-20", "-1e-9"), ("1e999", "1e999"), ("0.000000001", "1n"), ("1e-9", "1e-9")],
)
def test_extreme_exponents_within_bounds(text: str, expected: str) -> None:
    assert canonical(text) == expected


def test_a_string_parsed_again_gives_the_same_amount_and_a_bad_one_fails_again() -> None:
    first = Quantity.parse("90Mi")
    again = Quantity.parse("90Mi")
    assert again == first and str(again) == "90Mi" and again.format is first.format
    assert str(Quantity.parse("100m") + Quantity.parse("100m")) == "200m"
    assert str(Quantity.parse("100m")) == "100m"  # the sum made a new quantity; the parsed one is unchanged
    for _ in range(2):
        with pytest.raises(QuantityError):
            Quantity.parse("12Q")
