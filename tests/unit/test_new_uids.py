"""New objects' uids: version 4 UUIDs from a pool of random bytes, never repeated, not even across a fork."""

from __future__ import annotations

import os
import uuid

from pykubevirt.apiserver.metadata import new_uid, stamp_new


def test_uids_are_distinct_version_4_uuids_in_their_canonical_text() -> None:
    # More than one pool's worth, so the pool is refilled on the way.
    uids = [new_uid() for _ in range(1000)]
    assert len(set(uids)) == len(uids)
    for text in uids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and str(parsed) == text


def test_a_forked_child_does_not_repeat_its_parents_next_uids() -> None:
    new_uid()  # the pool holds unused bytes now
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next uids and leave without running the parent's clean-ups
        os.close(reader)
        os.write(writer, " ".join(new_uid() for _ in range(5)).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {new_uid() for _ in range(5)}
    assert len(child) == 5 and not child & parent


def test_a_new_object_gets_a_uid_and_loses_the_one_it_was_sent_with() -> None:
    obj = {"metadata": {"name": "a", "uid": "sent"}}
    stamp_new(obj, track_generation=True)
    assert obj["metadata"]["uid"] != "sent" and uuid.UUID(obj["metadata"]["uid"]).version == 4
