"""One qpid-proton command against a queue, for the tests of what the broker writes into
a message's header and message-annotations (modified outcomes, dead letters). Prints one
JSON object: {"ok": true, "got": MESSAGE} (or "all": [MESSAGE...]), or {"ok": false, "error": ...}.

  annotations.py CMD URL ADDRESS ARG_JSON
  send         send ARG's message ("count" times): body, durable, subject, ttl (s),
               expiry_time, annotations, instructions, properties, size (a body of that many bytes)
  send-reject  send it, then receive and reject it
  modify       receive one and settle it modified: "failed" (default true), "annotations"
               keyed by "keys" (symbol, string or ulong)
  receive, browse, reject   one message, accepted, browsed or rejected
  receive-all  "count" messages on one receiver, accepted
MESSAGE: body (a binary body as its length), delivery_count, ttl (s, 0: none), durable,
expiry_time, annotations, and sections (the descriptor codes of its sections in order).
"""
import json, sys
from proton import Message, Delivery, Data, symbol, ulong
from proton.reactor import Copy
from proton.utils import BlockingConnection

# The bytes each message arrived as, to read its sections in order with proton's decoder.
raw = []
_decode = Message.decode
def recording(self, data):
    raw.append(bytes(data))
    return _decode(self, data)
Message.decode = recording

def section_codes(b):
    d = Data()
    codes = []
    while b:
        d.clear()
        n = d.decode(b)
        d.rewind()
        d.next()
        codes.append(int(d.get_object().descriptor))
        b = b[n:]
    return codes

def keyed(kind, k):
    return ulong(int(k)) if kind == "ulong" else (k if kind == "string" else symbol(k))

def describe(m):
    return {"body": m.body if not isinstance(m.body, bytes) else len(m.body), "delivery_count": m.delivery_count,
            "ttl": m.ttl, "durable": m.durable, "expiry_time": m.expiry_time,
            "annotations": dict((str(k), v) for k, v in (m.annotations or {}).items()),
            "sections": section_codes(raw[-1])}

def message(arg):
    m = Message(body=arg.get("body", "hello"), durable=arg.get("durable", False), subject=arg.get("subject"))
    if "ttl" in arg:
        m.ttl = arg["ttl"]
    if "expiry_time" in arg:
        m.expiry_time = arg["expiry_time"]
    if "annotations" in arg:
        m.annotations = dict((symbol(k), v) for k, v in arg["annotations"].items())
    if "instructions" in arg:
        m.instructions = dict((symbol(k), v) for k, v in arg["instructions"].items())
    if "properties" in arg:
        m.properties = arg["properties"]
    if "size" in arg:
        m.body = b"x" * arg["size"]
    return m

cmd, url, address, arg = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
conn = BlockingConnection(url, timeout=10)
out = {"ok": True}
try:
    if cmd in ("send", "send-reject"):
        s = conn.create_sender(address)
        m = message(arg)
        for _ in range(arg.get("count", 1)):
            s.send(m)
        if cmd == "send-reject":
            r = conn.create_receiver(address, credit=1)
            out["got"] = describe(r.receive(timeout=10))
            r.reject()
    elif cmd == "modify":
        r = conn.create_receiver(address, credit=1)
        out["got"] = describe(r.receive(timeout=10))
        d = r.fetcher.unsettled[0]
        d.local.failed = arg.get("failed", True)
        kind = arg.get("keys", "symbol")
        d.local.annotations = dict((keyed(kind, k), v) for k, v in arg["annotations"].items())
        r.settle(Delivery.MODIFIED)
    elif cmd == "receive-all":
        # One receiver for them all: a second one would find the next already sent to the
        # first (proton tops its credit up), given back at close with its count raised.
        r = conn.create_receiver(address, credit=arg["count"])
        out["all"] = []
        for _ in range(arg["count"]):
            out["all"].append(describe(r.receive(timeout=10)))
            r.accept()
    elif cmd in ("receive", "browse", "reject"):
        r = conn.create_receiver(address, credit=1, options=Copy() if cmd == "browse" else None)
        out["got"] = describe(r.receive(timeout=10))
        if cmd == "receive":
            r.accept()
        elif cmd == "reject":
            r.reject()
    else:
        out = {"ok": False, "error": "unknown command %s" % cmd}
    conn.close()
except Exception as e:
    out = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
print(json.dumps(out, default=str))
