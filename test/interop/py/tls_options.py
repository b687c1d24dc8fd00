"""TLS and identity for the failover scripts, from the environment (so their
arguments stay as they are): TANDEM_PY_CA (a CA file: connect with amqps and
verify the broker's certificate and name against it), TANDEM_PY_CERT and
TANDEM_PY_KEY (a client certificate), TANDEM_PY_USER and TANDEM_PY_PASSWORD
(SASL PLAIN), TANDEM_PY_MECHS (allowed mechanisms)."""
import os
from proton import SSLDomain


def connect_options():
    """(URL scheme, keyword arguments for Container.connect / BlockingConnection)."""
    ca = os.environ.get("TANDEM_PY_CA")
    options = {}
    if os.environ.get("TANDEM_PY_USER"):
        options["user"] = os.environ["TANDEM_PY_USER"]
        options["password"] = os.environ.get("TANDEM_PY_PASSWORD", "")
        options["allowed_mechs"] = "PLAIN"
    if os.environ.get("TANDEM_PY_MECHS"):
        options["allowed_mechs"] = os.environ["TANDEM_PY_MECHS"]
    if not ca:
        return "amqp://", options
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(ca)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, ca)
    if os.environ.get("TANDEM_PY_CERT"):
        domain.set_credentials(os.environ["TANDEM_PY_CERT"], os.environ["TANDEM_PY_KEY"], None)
    options["ssl_domain"] = domain
    return "amqps://", options
