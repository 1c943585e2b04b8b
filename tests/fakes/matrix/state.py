"""What the fake homeserver knows: people, rooms, one event stream, media; no HTTP (see ``server``).

Every event (a message, an edit, a membership, an invite of the bot) gets the next position in one
stream; a sync token is ``s<position>``, and a sync since ``s<n>`` answers what came after ``n`` in the
rooms the bot had joined when it happened (and its invites); a room the bot joined since shows its
last events, from before the join too, as Synapse does. What a person does is a method here
(:meth:`MatrixState.message`, :meth:`MatrixState.invite`...); what the bot did is read back with
:meth:`MatrixState.bot_events` and friends. All under ``lock``: the server may run on another thread.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SERVER = "herald.test"
BOT = f"@herald:{SERVER}"
BOT_NAME = "Herald"
BOT_TOKEN = "syt_aGVyYWxk_fake_matrix_token"
NOBODY: frozenset[str] = frozenset()


@dataclass
class Room:
    room_id: str
    members: dict[str, str] = field(default_factory=dict)  # user -> membership (join, invite, leave)
    events: list[dict[str, Any]] = field(default_factory=list)
    encrypted: bool = False
    leave_reasons: list[str] = field(default_factory=list)  # why the bot left or declined


@dataclass(frozen=True)
class Item:
    """One entry of the stream: an event of a room the bot could see then, or an invite of the bot."""

    position: int
    room_id: str
    event: dict[str, Any]
    visible: bool  # the bot was joined when it happened
    invite: bool = False


@dataclass(frozen=True)
class Call:
    time: float  # time.monotonic()
    method: str
    path: str
    status: int


@dataclass
class Fault:
    route: str  # "send" (a message, not an edit), "edit", "upload", "sync"
    status: int
    retry_after_ms: int | None
    count: int
    lost: bool = False  # the request is carried out, and its answer is lost (a proxy's 504)


class MatrixState:
    """The homeserver's state (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users: dict[str, str] = {BOT: BOT_NAME}
        self.rooms: dict[str, Room] = {}
        self.stream: list[Item] = []
        self.media: dict[str, tuple[str, str, bytes]] = {}  # media id -> (name, mime, data)
        self.account_data: dict[str, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        # (access token, room, event type, transaction id) -> event id: a resent PUT is the same event
        self.txns: dict[tuple[str, str, str, str], str] = {}
        self.arrivals: dict[str, float] = {}  # the bot's event id -> time.monotonic() its send arrived
        self.send_times: list[float] = []  # time.monotonic() of each message send (not edits), refused too
        self.typing: list[str] = []  # rooms the bot said it types in
        self.confirmed = 0  # the highest position a sync's ``since`` confirmed
        self.open_syncs = 0  # incremental syncs waiting now
        self._ids = itertools.count(1)
        self._direct: dict[str, str] = {}  # user -> their direct room with the bot
        self.on_change: Callable[[], None] = lambda: None

    # --- people and rooms -------------------------------------------------------------------

    def add_user(self, user_id: str, name: str) -> None:
        with self.lock:
            self.users[user_id] = name

    def create_room(self, members: list[str], *, bot: bool = True, encrypted: bool = False) -> str:
        """A room whose ``members`` (and the bot, unless not ``bot``) have joined."""
        with self.lock:
            room_id = f"!room{next(self._ids)}:{SERVER}"
            self.rooms[room_id] = Room(room_id, encrypted=encrypted)
            for user in [*members, *([BOT] if bot else [])]:
                self._membership(room_id, user, user, "join")
            if encrypted:
                self._append(
                    room_id, members[0], "m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"}, ""
                )
        self.on_change()
        return room_id

    def direct_room(self, user: str) -> str:
        with self.lock:
            if user not in self._direct:
                self._direct[user] = self.create_room([user])
            return self._direct[user]

    def invite(self, inviter: str, *, encrypted: bool = False, room_id: str | None = None) -> str:
        """``inviter`` makes a room (encrypted or not; or takes ``room_id``) and invites the bot."""
        room_id = room_id or self.create_room([inviter], bot=False, encrypted=encrypted)
        with self.lock:
            self._membership(room_id, inviter, BOT, "invite")
        self.on_change()
        return room_id

    def turn_on_encryption(self, room_id: str, user: str) -> None:
        with self.lock:
            self.rooms[room_id].encrypted = True
            self._append(room_id, user, "m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"}, "")
        self.on_change()

    def message(self, room_id: str, sender: str, content: dict[str, Any]) -> dict[str, Any]:
        """``sender`` posts ``content`` (an ``m.room.message``) in the room; returns the event."""
        with self.lock:
            event = self._append(room_id, sender, "m.room.message", content)
        self.on_change()
        return event

    def redeliver(self, event_id: str) -> None:
        """The event comes again in the next sync (a homeserver that lost track of a confirmation)."""
        with self.lock:
            item = next(i for i in self.stream if i.event["event_id"] == event_id)
            self.stream.append(Item(len(self.stream) + 1, item.room_id, item.event, item.visible))
        self.on_change()

    def _membership(self, room_id: str, sender: str, user: str, membership: str, reason: str = "") -> None:
        room = self.rooms[room_id]
        room.members[user] = membership
        content: dict[str, Any] = {"membership": membership, "displayname": self.users.get(user, user)}
        if reason:
            content["reason"] = reason
        invite = user == BOT and membership == "invite"
        self._append(room_id, sender, "m.room.member", content, user, invite=invite)

    def _append(
        self, room_id: str, sender: str, kind: str, content: dict[str, Any], state_key: str | None = None,
        *, invite: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        room = self.rooms[room_id]
        event: dict[str, Any] = {
            "type": kind,
            "sender": sender,
            "event_id": f"$event{next(self._ids)}",
            "room_id": room_id,
            "origin_server_ts": int(time.time() * 1000),
            "content": content,
        }
        if state_key is not None:
            event["state_key"] = state_key
        room.events.append(event)
        visible = room.members.get(BOT) == "join"
        self.stream.append(Item(len(self.stream) + 1, room_id, event, visible, invite))
        return event

    # --- what the bot does (called by the server under the lock) -------------------------------

    def bot_send(
        self, room_id: str, kind: str, content: dict[str, Any], txn: str, token: str = BOT_TOKEN
    ) -> str:
        """The bot's event; a transaction id its access token used before in this room for this event
        type answers that event again and adds none (whatever the content), as the spec says and Synapse
        does (its key: the request's path and the device). A request refused before this point (a
        fault, a room the bot is not in) left nothing behind, as Synapse forgets a failed transaction."""
        known = self.txns.get((token, room_id, kind, txn))
        if known is not None:
            return known
        event = self._append(room_id, BOT, kind, content)
        self.txns[(token, room_id, kind, txn)] = event["event_id"]
        self.arrivals[event["event_id"]] = time.monotonic()
        return str(event["event_id"])

    def bot_join(self, room_id: str) -> None:
        self._membership(room_id, BOT, BOT, "join")

    def bot_leave(self, room_id: str, reason: str) -> None:
        self.rooms[room_id].leave_reasons.append(reason)
        self._membership(room_id, BOT, BOT, "leave", reason)

    def redact(self, room_id: str, event_id: str) -> bool:
        for event in self.rooms[room_id].events:
            if event["event_id"] == event_id:
                event["redacted"] = True
                return True
        return False

    def take_fault(self, route: str) -> Fault | None:
        for fault in self.faults:
            if fault.route == route and fault.count > 0:
                fault.count -= 1
                return fault
        return None

    # --- sync ------------------------------------------------------------------------------------

    def sync(self, since: int | None, limit: int, not_senders: frozenset[str] = NOBODY) -> dict[str, Any]:
        """The answer to a sync since position ``since`` (None: an initial sync); timeline events of
        ``not_senders`` left out (a filter's ``not_senders``)."""
        join: dict[str, Any] = {}
        invite: dict[str, Any] = {}
        end = len(self.stream)
        if since is None:
            for room in self.rooms.values():
                if room.members.get(BOT) == "join":
                    timeline = [e for e in room.events if e["sender"] not in not_senders][-limit:]
                    join[room.room_id] = self._joined(room, timeline, self._state(room), False, None)
                elif room.members.get(BOT) == "invite":
                    invite[room.room_id] = self._invited(room)
        else:
            news: dict[str, list[Item]] = {}
            for item in self.stream[since:]:
                if item.invite and self.rooms[item.room_id].members.get(BOT) == "invite":
                    invite[item.room_id] = self._invited(self.rooms[item.room_id])
                elif item.visible and item.event["sender"] not in not_senders:
                    news.setdefault(item.room_id, []).append(item)
            for room_id in self._joined_since(since):  # as Synapse: a room just joined shows its last
                shown = [i for i in self.stream[:end] if i.event["sender"] not in not_senders]
                news[room_id] = [i for i in shown if i.room_id == room_id]  # from before the join too
            for room_id, items in news.items():
                cut = len(items) > limit
                kept = items[-limit:]
                gap = f"s{kept[0].position - 1}" if cut else None
                join[room_id] = self._joined(self.rooms[room_id], [i.event for i in kept], [], cut, gap)
        return {"next_batch": f"s{end}", "rooms": {"join": join, "invite": invite}}

    def _joined_since(self, since: int) -> set[str]:
        """The rooms the bot joined after position ``since`` and is still in."""
        return {
            item.room_id
            for item in self.stream[since:]
            if item.event["type"] == "m.room.member"
            and item.event.get("state_key") == BOT
            and item.event["content"].get("membership") == "join"
            and self.rooms[item.room_id].members.get(BOT) == "join"
        }

    def _joined(
        self,
        room: Room,
        timeline: list[dict[str, Any]],
        state: list[dict[str, Any]],
        cut: bool,
        gap: str | None,
    ) -> dict[str, Any]:
        joined = sum(1 for m in room.members.values() if m == "join")
        answer: dict[str, Any] = {
            "timeline": {"events": [_shown(e) for e in timeline], "limited": cut},
            "state": {"events": state},
            "summary": {"m.joined_member_count": joined},
        }
        if gap is not None:
            answer["timeline"]["prev_batch"] = gap
        return answer

    def _state(self, room: Room) -> list[dict[str, Any]]:
        return [e for e in room.events if "state_key" in e]

    def _invited(self, room: Room) -> dict[str, Any]:
        events = [
            {"type": e["type"], "sender": e["sender"], "state_key": e["state_key"], "content": e["content"]}
            for e in room.events
            if "state_key" in e and (e["type"] != "m.room.member" or e["state_key"] == BOT)
        ]
        return {"invite_state": {"events": events}}

    def messages_between(self, room_id: str, start: int, stop: int, limit: int) -> dict[str, Any]:
        """``/messages`` backwards from position ``start`` down to ``stop`` (exclusive); history from
        before the bot joined too, as Synapse shows it (history visibility "shared")."""
        items = [i for i in self.stream[stop:start] if i.room_id == room_id][::-1][:limit]
        end = f"s{items[-1].position - 1}" if items else f"s{stop}"
        return {"chunk": [_shown(i.event) for i in items], "start": f"s{start}", "end": end}

    def pending(self) -> bool:
        """Something for the bot (not its own) that no sync has confirmed yet."""
        return any(
            item.invite or (item.visible and item.event["sender"] != BOT)
            for item in self.stream[self.confirmed :]
        )

    # --- what the bot did --------------------------------------------------------------------------

    def bot_events(self, room_id: str) -> list[dict[str, Any]]:
        with self.lock:
            room = self.rooms.get(room_id)
            return [dict(e) for e in room.events if e["sender"] == BOT] if room else []


def _shown(event: dict[str, Any]) -> dict[str, Any]:
    """An event as a sync shows it (a redacted one has lost its content)."""
    if event.get("redacted"):
        return {**{k: v for k, v in event.items() if k != "redacted"}, "content": {}}
    return {k: v for k, v in event.items() if k != "redacted"}
