"""The python-proton side of the qpid-jms interop test (test/jms/jms.test.ts).
`receive URL QUEUE COUNT`: print every message's header, properties, application
properties, message annotations and body (type-tagged) as JSON.
`send URL QUEUE`: send one message per JMS type, marked with the x-opt-jms-msg-type
annotation qpid-jms reads, with headers and application properties of every type."""
import json, sys
from proton import Message, symbol, byte, short, int32, float32, ubyte
from proton.utils import BlockingConnection


def tagged(v):
    if isinstance(v, (bytes, bytearray)):
        return {"binary": list(v)}
    if isinstance(v, dict):
        return {str(k): tagged(x) for k, x in v.items()}
    if isinstance(v, list):
        return [tagged(x) for x in v]
    return v


def describe(m):
    return {
        "durable": m.durable, "priority": m.priority, "ttl": m.ttl,
        "correlation_id": m.correlation_id, "reply_to": m.reply_to, "subject": m.subject,
        "content_type": m.content_type,
        "annotations": {str(k): tagged(v) for k, v in (m.annotations or {}).items()},
        "properties": {k: [tagged(v), type(v).__name__] for k, v in (m.properties or {}).items()},
        "body": tagged(m.body), "body_type": type(m.body).__name__,
    }


mode, url, queue = sys.argv[1], sys.argv[2], sys.argv[3]
conn = BlockingConnection(url)
if mode == "receive":
    count = int(sys.argv[4])
    r = conn.create_receiver(queue, credit=count)
    out = []
    for _ in range(count):
        out.append(describe(r.receive(timeout=10)))
        r.accept()
    conn.close()
    print(json.dumps(out))
else:
    s = conn.create_sender(queue)
    # (JMS type code, body) as qpid-jms maps them: 0 Message, 1 Object, 2 Map, 3 Bytes, 4 Stream, 5 Text.
    bodies = [(5, "py text"), (3, b"\x01\x02\xff"), (2, {"k": "v", "n": 5}), (4, ["one", 2]), (0, None)]
    for i, (code, body) in enumerate(bodies):
        m = Message(body=body, durable=True, priority=8, ttl=600, correlation_id="py-corr-%d" % i,
                    reply_to="py.replies", subject="py-type-%d" % i,
                    annotations={symbol("x-opt-jms-msg-type"): byte(code), symbol("x-opt-jms-dest"): byte(0)},
                    properties={"pString": "s", "pInt": int32(7), "pLong": 1 << 40, "pShort": short(3),
                                "pByte": byte(4), "pBool": True, "pDouble": 1.5, "pFloat": float32(2.5), "index": int32(i)})
        if code == 3:
            m.content_type = "application/octet-stream"
        s.send(m)
    conn.close()
    print(json.dumps({"sent": len(bodies)}))
