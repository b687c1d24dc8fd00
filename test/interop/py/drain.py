"""Receive and accept everything on a queue (until 1 s of silence); print the bodies as JSON.
Over TLS when TANDEM_PY_CA names a CA file (see tls_options.py): URL is then host:port."""
import json, sys
from proton.utils import BlockingConnection
from proton import Timeout
from tls_options import connect_options

url, queue = sys.argv[1], sys.argv[2]
scheme, options = connect_options()
conn = BlockingConnection(scheme + url if scheme == "amqps://" else url, **options)
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
