"""The Priority admission plugin's rules and PriorityClass validation, on plain data."""

from __future__ import annotations

from typing import Any

from pykubevirt.api import pod_priority as pp


def pc(name: str, value: int, **fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "value": value, **fields}


def admit(spec: dict[str, Any], *classes: dict[str, Any]) -> str | None:
    by_name = {c["metadata"]["name"]: c for c in classes}
    return pp.admit_new_pod(spec, by_name.get, lambda: classes)


def test_a_pod_naming_no_class_gets_priority_zero_when_no_class_is_the_default() -> None:
    spec: dict[str, Any] = {}
    assert admit(spec, pc("high", 1000)) is None
    assert spec == {"priority": 0, "preemptionPolicy": "PreemptLowerPriority"}


def test_a_pod_naming_no_class_gets_the_global_default_class_and_its_policy() -> None:
    spec: dict[str, Any] = {}
    assert admit(spec, pc("high", 1000), pc("batch", -5, globalDefault=True, preemptionPolicy="Never")) is None
    assert spec == {"priorityClassName": "batch", "priority": -5, "preemptionPolicy": "Never"}


def test_of_two_default_classes_the_lower_value_wins() -> None:
    classes = [pc("b", 20, globalDefault=True), pc("a", 10, globalDefault=True), pc("c", 5)]
    assert pp.default_class(classes) == classes[1]


def test_a_pod_naming_a_class_gets_its_value() -> None:
    spec: dict[str, Any] = {"priorityClassName": "high"}
    assert admit(spec, pc("high", 1000, preemptionPolicy="PreemptLowerPriority")) is None
    assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "PreemptLowerPriority")


def test_a_pod_naming_a_missing_class_is_refused() -> None:
    assert admit({"priorityClassName": "gold"}, pc("high", 1000)) == "no PriorityClass with name gold was found"


def test_a_pod_may_not_say_a_priority_other_than_its_classes() -> None:
    assert admit({"priorityClassName": "high", "priority": 7}, pc("high", 1000)) == (
        "the integer value of priority (7) must not be provided in pod spec; "
        "priority admission controller computed 1000 from the given PriorityClass name"
    )
    spec: dict[str, Any] = {"priorityClassName": "high", "priority": 1000}
    assert admit(spec, pc("high", 1000)) is None  # the same value is fine (a pod copied from another)


def test_a_pod_may_not_say_a_preemption_policy_other_than_its_classes() -> None:
    assert admit({"preemptionPolicy": "Never"}) == (
        "the string value of PreemptionPolicy (Never) must not be provided in pod spec; "
        "priority admission controller computed PreemptLowerPriority from the given PriorityClass name"
    )


def test_an_update_keeps_the_priority_the_pod_was_created_with() -> None:
    spec: dict[str, Any] = {"priorityClassName": "high"}
    pp.keep_priority(spec, {"priorityClassName": "high", "priority": 1000, "preemptionPolicy": "Never"})
    assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "Never")
    stated = {"priority": 5}
    pp.keep_priority(stated, {"priority": 1000})
    assert stated["priority"] == 5  # a change is left for the update rule to refuse


def messages(found: list[Any]) -> list[tuple[str, str]]:
    return [(c.field, c.message) for c in found]


def test_a_user_class_may_not_exceed_a_billion() -> None:
    assert pp.priority_class_causes(pc("ok", 1_000_000_000)) == []
    assert messages(pp.priority_class_causes(pc("big", 1_000_000_001))) == [
        ("value", "Forbidden: maximum allowed value of a user defined priority is 1000000000")
    ]


def test_the_system_prefix_is_reserved() -> None:
    assert messages(pp.priority_class_causes(pc("system-mine", 10))) == [
        (
            "metadata.name",
            "Forbidden: priority class names with 'system-' prefix are reserved for system use only. "
            "error: system-mine is not a known system priority class",
        )
    ]
    assert messages(pp.priority_class_causes(pc("system-node-critical", 10)))[0][1].endswith(
        "error: value of system-node-critical PriorityClass must be 2000001000"
    )
    assert all(pp.priority_class_causes(c) == [] for c in pp.system_priority_classes())


def test_a_class_value_and_policy_are_fixed_once_made() -> None:
    old = pc("high", 1000, preemptionPolicy="PreemptLowerPriority")
    described = pc("high", 1000, preemptionPolicy="PreemptLowerPriority", description="x")
    assert pp.priority_class_causes(described, old) == []
    assert messages(pp.priority_class_causes(pc("high", 2000, preemptionPolicy="Never"), old)) == [
        ("value", "Forbidden: may not be changed in an update."),
        ("preemptionPolicy", 'Invalid value: "Never": field is immutable'),
    ]


def test_a_policy_must_be_a_known_one() -> None:
    assert messages(pp.priority_class_causes(pc("p", 1, preemptionPolicy="Sometimes"))) == [
        ("preemptionPolicy", 'Unsupported value: "Sometimes": supported values: "Never", "PreemptLowerPriority"')
    ]


def test_only_one_class_may_be_the_default() -> None:
    current = pc("a", 1, globalDefault=True)
    assert pp.already_default(pc("b", 2, globalDefault=True), [current], creating=True) == (
        "PriorityClass a is already marked as default. Only one default can exist"
    )
    assert pp.already_default(pc("a", 1, globalDefault=True), [current], creating=False) is None
    assert pp.already_default(pc("b", 2, globalDefault=True), [current], creating=False) is not None
    assert pp.already_default(pc("b", 2), [current], creating=True) is None


def test_a_class_without_a_value_or_policy_reads_zero_and_preempts() -> None:
    bare: dict[str, Any] = {"metadata": {"name": "bare"}}
    pp.default_priority_class(bare)
    assert (bare["value"], bare["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    never = pc("n", 5, preemptionPolicy="Never")
    pp.default_priority_class(never)
    assert (never["value"], never["preemptionPolicy"]) == (5, "Never")
