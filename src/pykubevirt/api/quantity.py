"""Kubernetes resource quantities (`128Mi`, `1.5Gi`, `500m`, `2`) with apimachinery's parsing and canonical form."""

from __future__ import annotations

import enum
import functools
import re
from fractions import Fraction
from typing import Any

_NUMBER_RE = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)$")

# Quantities are capped and rounded like Kubernetes': at most 2^63-1, at most nine fractional digits (nano).
_MAX_INT64 = (1 << 63) - 1
_NANO = Fraction(1, 10**9)


class QuantityFormat(enum.Enum):
    DECIMAL_EXPONENT = "DecimalExponent"
    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"


_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT = {v: k for k, v in _BINARY_SUFFIXES.items()}


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


# Go keeps a quantity as a scaled decimal, so even `1e1000000` costs it nothing. An exact fraction does not scale
# that way: beyond these bounds, which no resource amount comes near, a quantity is rejected rather than computed.
_MAX_DIGITS = 1000
_MAX_DECIMAL_EXPONENT = 1000
_MAX_INT32 = (1 << 31) - 1


def _scaled(mantissa: int, mantissa_digits: int, exponent: int) -> Fraction:
    """mantissa × 10^exponent, exact; a value below one nano only matters as non-zero, so it becomes 1n."""
    if mantissa == 0:
        return Fraction(0)
    if mantissa_digits + exponent > _MAX_DECIMAL_EXPONENT:
        raise QuantityError(f"quantity is larger than 10^{_MAX_DECIMAL_EXPONENT}")
    if mantissa_digits + exponent < -9:
        # Rounded up to the smallest representable amount, as parsing does for any tiny non-zero value.
        return _NANO
    return mantissa * Fraction(10) ** exponent


def _interpret_suffix(suffix: str) -> tuple[int, int, QuantityFormat]:
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], QuantityFormat.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], QuantityFormat.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        try:
            exponent = int(suffix[1:])
        except ValueError:
            pass
        else:
            # Go parses the exponent as an int32.
            if -_MAX_INT32 - 1 <= exponent <= _MAX_INT32:
                return 10, exponent, QuantityFormat.DECIMAL_EXPONENT
    raise QuantityError("unable to parse quantity's suffix")


def _round_up_to_nano(value: Fraction) -> Fraction:
    """Round away from zero to nine decimals, as `inf.RoundUp` does."""
    scaled = value / _NANO
    if scaled.denominator == 1:
        return value
    magnitude = -(-abs(scaled.numerator) // scaled.denominator)
    return Fraction(magnitude if value > 0 else -magnitude) * _NANO


@functools.total_ordering
class Quantity:
    """An exact fixed-point amount plus the format it was written in, which is kept for printing."""

    __slots__ = ("format", "value")

    def __init__(self, value: Fraction | int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> None:
        self.value = Fraction(value)
        self.format = fmt

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        """Parse a quantity string (or a JSON number) exactly as `resource.ParseQuantity` does."""
        if isinstance(text, bool):
            raise QuantityError(f"quantity must be a string or a number, not {text!r}")
        if isinstance(text, int):
            text = str(text)
        elif isinstance(text, float):
            text = repr(text) if not text.is_integer() else str(int(text))
        if not isinstance(text, str):
            raise QuantityError(f"quantity must be a string or a number, not {type(text).__name__}")
        return _parse_text(text)

    @classmethod
    def _from_text(cls, text: str) -> Quantity:
        if text == "":
            raise QuantityError(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            )
        match = _NUMBER_RE.match(text)
        if not match or (match.group(2) == "" and not match.group(3)):
            raise QuantityError(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            )
        sign, whole, frac, suffix = match.groups()
        base, exponent, fmt = _interpret_suffix(suffix)
        digits = ((whole or "0") + (frac or "")).lstrip("0")
        if len(digits) > _MAX_DIGITS:
            raise QuantityError(f"quantity has more than {_MAX_DIGITS} significant digits")
        if base == 10:
            value = _scaled(int(digits or "0"), len(digits), exponent - len(frac or ""))
        else:
            value = Fraction(int(digits or "0"), 10 ** len(frac or "")) * 2**exponent
        if sign == "-":
            value = -value
        if value != 0:
            value = _round_up_to_nano(value)
        if fmt is QuantityFormat.BINARY_SI and value > _MAX_INT64:
            value = Fraction(_MAX_INT64)
        if fmt is QuantityFormat.BINARY_SI and 0 < value < 1:
            fmt = QuantityFormat.DECIMAL_SI
        return cls(value, fmt)

    # Arithmetic keeps the left operand's format, as Quantity.Add does.
    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self.format)

    def __mul__(self, factor: int | Fraction) -> Quantity:
        return Quantity(self.value * factor, self.format)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.value == other.value
        return NotImplemented

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def is_zero(self) -> bool:
        return self.value == 0

    def ceil_int(self) -> int:
        """The smallest integer not below the value (`Value()` for positive amounts)."""
        return -(-self.value.numerator // self.value.denominator)

    def milli(self) -> int:
        """The value in thousandths, rounded up (`MilliValue()`)."""
        scaled = self.value * 1000
        return -(-scaled.numerator // scaled.denominator)

    def __str__(self) -> str:
        if self.value == 0:
            return "0"
        fmt = self.format
        if fmt is QuantityFormat.BINARY_SI:
            if -1024 < self.value < 1024 or self.value.denominator != 1:
                fmt = QuantityFormat.DECIMAL_SI
        if fmt is QuantityFormat.BINARY_SI:
            mantissa, exponent = int(self.value), 0
            while exponent < 60 and mantissa % 1024 == 0:
                mantissa //= 1024
                exponent += 10
            return f"{mantissa}{_BINARY_BY_EXPONENT.get(exponent, '')}"
        mantissa, exponent = _decimal_canonical(self.value)
        if fmt is QuantityFormat.DECIMAL_EXPONENT:
            return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"
        while exponent > 18:
            mantissa *= 1000
            exponent -= 3
        return f"{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"

    def to_json(self) -> str:
        return str(self)


# Writes and reconciles parse the same few amounts ("100m", "90Mi") over and over, and parsing one exactly (Fractions)
# is most of their arithmetic. A Quantity is not changed after it is made, so one can be shared; errors are not kept.
@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Quantity:
    return Quantity._from_text(text)


def _decimal_canonical(value: Fraction) -> tuple[int, int]:
    """Mantissa and a multiple-of-three exponent with the largest exponent that loses no precision."""
    exponent = 0
    while value.denominator != 1:
        value *= 10
        exponent -= 1
    mantissa = value.numerator
    while mantissa != 0 and mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    remainder = exponent % 3
    if remainder:
        mantissa *= 10**remainder
        exponent -= remainder
    return mantissa, exponent


def parse_quantity(value: Any) -> Quantity:
    """Parse a quantity found in an object (string or number)."""
    return Quantity.parse(value)


def canonical(value: Any) -> str:
    """The canonical string Kubernetes would store for `value`."""
    return str(Quantity.parse(value))


MI = 1024 * 1024
GI = 1024 * MI
