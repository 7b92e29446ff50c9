"""A guest's panic from the line libvirt writes into QEMU's log, in KubeVirt's words."""

from __future__ import annotations

from pykubevirt.launcher.guest_panic import CRASHLOADED, PANICKED, GuestPanics, panic_info, panic_message

HYPERV_LINE = (
    "2026-12-05 16:30:49.506+0000: panic hyper-v: "
    "arg1='0x7e', arg2='0xffffffffc0000005', arg3='0x1', arg4='0x0', arg5='0x0'"
)


def test_a_windows_bugcheck_gives_its_code_and_parameters() -> None:
    info = panic_info(HYPERV_LINE)
    assert info == {"type": "hyper-v", "arg1": 0x7E, "arg2": 0xFFFFFFFFC0000005, "arg3": 1, "arg4": 0, "arg5": 0}
    assert panic_message(info) == "GuestPanicked: '0x7e', '0xffffffffc0000005', '0x1', '0x0', '0x0'"


def test_another_type_is_named_and_no_details_say_so() -> None:
    s390 = panic_info("2026-12-05 16:30:49.506+0000: panic s390: core='0' psw-mask='0x1' psw-addr='0x2' reason='x'")
    assert s390 == {"type": "s390"}
    assert panic_message(s390) == "GuestPanicked: type=s390"
    assert panic_message(None) == panic_message({}) == "GuestPanicked (details unavailable)"


def test_lines_that_are_not_a_panic_note_give_nothing() -> None:
    for line in (
        "2026-12-05 22:21:04.882+0000: starting up libvirt version: 9.0.0",
        "2026-12-05 22:22:41.606+0000: shutting down, reason=crashed",
        "Kernel panic - not syncing: sysrq triggered crash",
    ):
        assert panic_info(line) is None, line


def test_the_report_counts_panics_and_keeps_the_last_ones_details() -> None:
    panics = GuestPanics()
    assert panics.record(CRASHLOADED, None)
    assert panics.status() == {
        "count": 1,
        "message": "GuestPanicked (details unavailable)",
        "type": "unknown",
        "bugcheckCode": "unknown",
    }
    assert panics.record(CRASHLOADED, panic_info(HYPERV_LINE))
    status = panics.status()
    assert (status["count"], status["type"], status["bugcheckCode"]) == (2, "hyper-v", "0x7e")


def test_kdump_recovered_panics_each_count_until_one_stops_the_guest() -> None:
    panics = GuestPanics()
    assert panics.record(CRASHLOADED, None) and panics.record(CRASHLOADED, None)
    assert panics.record(PANICKED, None)
    # Handled, as KubeVirt's launcher marks it: whatever libvirt tells of afterwards is not counted again.
    assert not panics.record(PANICKED, panic_info(HYPERV_LINE))
    assert not panics.record(CRASHLOADED, None)
    assert panics.status()["count"] == 3 and panics.status()["type"] == "unknown"
