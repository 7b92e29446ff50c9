"""The CA bundle's merge: the current CA first, the ones it replaced kept while the overlap lasts, expired ones and
duplicates never."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509

from pykubevirt.pki import certificates
from pykubevirt.pki.ca_bundle import MAX_CERTIFICATES, bundle_certificates, merge_ca_bundle

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
OVERLAP = 30 * DAY


def ca_born(monkeypatch: pytest.MonkeyPatch, at: datetime.datetime, validity: datetime.timedelta) -> x509.Certificate:
    monkeypatch.setattr(certificates, "now", lambda: at)
    return certificates.create_ca(f"ca-{at:%j}", validity=validity)[0]


def merged(
    current: x509.Certificate, previous: list[x509.Certificate], at: datetime.datetime
) -> list[x509.Certificate]:
    return bundle_certificates(merge_ca_bundle(current, previous, OVERLAP, at))


def test_replaced_cas_stay_while_the_one_after_each_is_younger_than_the_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second, third = (ca_born(monkeypatch, T0 + n * 10 * DAY, 365 * DAY) for n in range(3))
    assert merged(third, [first, second], T0 + 25 * DAY) == [third, second, first]
    # `first` goes once `second` has existed longer than the overlap; `second` once `third` has.
    assert merged(third, [first, second], T0 + 45 * DAY) == [third, second]
    assert merged(third, [second, first], T0 + 51 * DAY) == [third]


def test_expired_duplicated_and_unreadable_entries_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    short = ca_born(monkeypatch, T0, 2 * DAY)
    current = ca_born(monkeypatch, T0 + DAY, 365 * DAY)
    assert merged(current, [short, current, short], T0 + DAY) == [current, short]
    assert merged(current, [short], T0 + 3 * DAY) == [current]
    assert bundle_certificates(b"") == [] and bundle_certificates(b"not a certificate") == []


def test_the_bundle_never_holds_more_than_kubevirts_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    many = [ca_born(monkeypatch, T0 + n * datetime.timedelta(hours=1), 365 * DAY) for n in range(60)]
    current = ca_born(monkeypatch, T0 + 3 * DAY, 365 * DAY)
    kept = merged(current, many, T0 + 3 * DAY)
    # The newest of the old ones, newest first, after the current CA.
    assert len(kept) == MAX_CERTIFICATES + 1 and kept[0] == current and kept[1:] == many[::-1][:MAX_CERTIFICATES]
