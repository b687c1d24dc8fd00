"""Receive and accept everything on a queue (until 1 s of silence); print the bodies as JSON."""
import json, sys
from proton.utils import BlockingConnection
from proton import Timeout

url, queue = sys.argv[1], sys.argv[2]
conn = BlockingConnection(url)
receiver = conn.create_receiver(queue)
bodies = []
while True:
    try:
        msg = receiver.receive(timeout=1)
    except Timeout:
        break
    bodies.append(msg.body)
    receiver.accept()
conn.close()
print(json.dumps(bodies))
