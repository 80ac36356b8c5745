"""Topic ids in decoded bodies, given their names.

Since Kafka 3.x, Fetch, OffsetCommit, DeleteTopics and others name a topic by its
16-byte id; a reader wants the name. Both the dissector (names learned from the
capture's Metadata answers) and the replay (names from the target's) put a
`TopicName` key right after each bare `TopicId`, so bodies read and compare by name.
"""

from __future__ import annotations

from uuid import UUID

__all__ = ["with_topic_name", "name_topic_ids"]


def with_topic_name(obj: dict, names: dict) -> None:
    """TopicName (None when unknown) right after obj's TopicId."""
    items = list(obj.items())
    obj.clear()
    for k, v in items:
        obj[k] = v
        if k == "TopicId":
            obj["TopicName"] = names.get(v)


def name_topic_ids(obj, names: dict) -> None:
    """with_topic_name on every dict of a decoded body that has a TopicId but neither a Name nor a TopicName."""
    if type(obj) is list:
        for v in obj:
            if type(v) is dict or type(v) is list:
                name_topic_ids(v, names)
        return
    if type(obj) is not dict:
        return
    for v in obj.values():
        if type(v) is dict or type(v) is list:
            name_topic_ids(v, names)
    if type(obj.get("TopicId")) is UUID and "Name" not in obj and "TopicName" not in obj:
        with_topic_name(obj, names)
