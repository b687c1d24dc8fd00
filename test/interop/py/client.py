#!/usr/bin/python3
"""A qpid-proton client for tandem interop tests. One command per run; prints one
JSON object on stdout ({"ok": true, ...} or {"ok": false, "error": ...}).

Run with Debian's /usr/bin/python3 (python3-qpid-proton), not a pyenv python.

  client.py send URL ADDRESS --count N [--durable] [--body-prefix P] [--presettled]
  client.py receive URL ADDRESS --count N [--credit C] [--timeout S] [--outcome accept|release|reject]
  client.py browse URL ADDRESS --count N [--timeout S]
  client.py request URL ADDRESS --body TEXT [--timeout S]   (dynamic reply queue)
  common: --user U --password P --mechs "PLAIN" --ca FILE (amqps) --cert F --key F
"""
import argparse
import json
import sys

from proton import Message, SSLDomain
from proton.reactor import Copy, DynamicNodeProperties
from proton import ConnectionException
from proton.utils import BlockingConnection, SendException, LinkDetached
from proton import Timeout


def connect(a):
    kw = {"timeout": a.timeout}
    if a.ca or a.cert:
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        if a.ca:
            domain.set_trusted_ca_db(a.ca)
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, a.ca)
        if a.cert:
            domain.set_credentials(a.cert, a.key, None)
        kw["ssl_domain"] = domain
    if a.user:
        kw["user"] = a.user
        kw["password"] = a.password
    if a.mechs:
        kw["allowed_mechs"] = a.mechs
    return BlockingConnection(a.url, **kw)


def body_of(m):
    b = m.body
    if isinstance(b, bytes):
        return b.decode("utf-8", "replace")
    return b


def describe(m):
    return {
        "body": body_of(m),
        "durable": bool(m.durable),
        "priority": m.priority,
        "delivery_count": m.delivery_count,
        "subject": m.subject,
        "correlation_id": m.correlation_id,
        "properties": m.properties,
        "annotations": dict((str(k), v) for k, v in (m.annotations or {}).items()),
    }


def cmd_send(a, conn):
    options = None
    if a.presettled:
        from proton.reactor import AtMostOnce
        options = AtMostOnce()
    sender = conn.create_sender(a.address, options=options)
    outcomes = []
    for i in range(a.count):
        m = Message(body="%s%d" % (a.body_prefix, i), durable=a.durable, subject=a.subject)
        try:
            sender.send(m, timeout=a.timeout)
            outcomes.append({"state": "accepted"})
        except SendException as e:
            remote = getattr(e, "state", None)
            desc = None
            try:
                cond = sender.link.remote_condition
            except Exception:
                cond = None
            outcomes.append({"state": "rejected" if remote == 0x25 or str(remote).endswith("REJECTED") else str(remote), "description": str(e)})
    sender.close()
    return {"outcomes": outcomes}


def cmd_receive(a, conn, browse=False):
    options = Copy() if browse else None
    receiver = conn.create_receiver(a.address, credit=a.credit or a.count, options=options)
    got = []
    try:
        for _ in range(a.count):
            m = receiver.receive(timeout=a.timeout)
            got.append(describe(m))
            if browse:
                continue
            if a.outcome == "accept":
                receiver.accept()
            elif a.outcome == "release":
                receiver.release(delivered=False)
            elif a.outcome == "reject":
                receiver.reject()
    except Timeout:
        pass
    receiver.close()
    return {"messages": got}


def cmd_request(a, conn):
    receiver = conn.create_receiver(None, dynamic=True, credit=1)
    reply_to = receiver.remote_source.address
    sender = conn.create_sender(a.address)
    sender.send(Message(body=a.body, reply_to=reply_to, correlation_id="req-1"), timeout=a.timeout)
    m = receiver.receive(timeout=a.timeout)
    receiver.accept()
    return {"reply_to": reply_to, "reply": describe(m)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["send", "receive", "browse", "request"])
    p.add_argument("url")
    p.add_argument("address")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--credit", type=int, default=0)
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--outcome", default="accept", choices=["accept", "release", "reject"])
    p.add_argument("--durable", action="store_true")
    p.add_argument("--presettled", action="store_true")
    p.add_argument("--subject")
    p.add_argument("--body-prefix", default="py")
    p.add_argument("--body", default="ping")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--mechs")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    a = p.parse_args()
    try:
        conn = connect(a)
    except Exception as e:  # SASL failures and refusals end here
        print(json.dumps({"ok": False, "stage": "connect", "error": "%s: %s" % (type(e).__name__, e)}))
        return 1
    try:
        if a.command == "send":
            out = cmd_send(a, conn)
        elif a.command == "receive":
            out = cmd_receive(a, conn)
        elif a.command == "browse":
            out = cmd_receive(a, conn, browse=True)
        else:
            out = cmd_request(a, conn)
        out["ok"] = True
    except (LinkDetached, ConnectionException, Timeout, SendException) as e:
        out = {"ok": False, "stage": a.command, "error": "%s: %s" % (type(e).__name__, e)}
    finally:
        try:
            conn.close()
        except Exception:
            pass
    print(json.dumps(out, default=str))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
