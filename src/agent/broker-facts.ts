// The agent's one door to the rest of tandem. The agent is a separate program:
// Pacemaker runs it at every action, failover included, so what it loads is what
// a failover waits for. It needs only a few facts the broker also uses, and they
// are all named here, so a new dependency on the broker is a visible change to
// this file (test/unit/agent/boundary.test.ts holds every other module of
// src/agent/ to importing from inside the room or from here, and keeps what this
// file reaches clear of the broker's runtime: queues, journal, AMQP server,
// replication, DR).
//
// Each fact stays where the broker keeps it, so the agent and tandemd never
// disagree on it:

// The broker's configuration, read and checked exactly as tandemd reads it
// (validate-all refuses what tandemd would refuse).
export { ConfigError, loadSettings, type Settings } from '../ops/config.js';

// The data directory's lock: a stale lock file left by a killed broker is removed on start.
export { LOCK_FILE_NAME } from '../store/lock.js';

// The one rule for promoting a broker (the broker applies it to HA-PROMOTE too), and
// the reader of the epoch history HA-STATUS reports.
export {
  comparePositions,
  judgePromotion,
  readEpochHistory,
  type EpochStartView,
  type GuardVerdict,
  type Position,
} from '../ha/promotion-guard.js';

// ha-brokers-url, parsed as the brokers parse it, and how many ready backups settle.
export { endpointKey, parseBrokersUrl } from '../ha/brokers-url.js';
// host:port as the brokers write it in messages (an IPv6 host in brackets).
export { hostPort } from '../util/host-port.js';
export { minReadyBackupsRisk } from '../ha/settle-quorum.js';

// Talking to the brokers as an HA admin: the management client, and the addresses,
// identity and TLS of the links between brokers.
export { ConnectError, ManagementClient, type BrokerAddress } from '../admin/client.js';
export type { LinkTls } from '../admin/link-tls.js';
export { endpointAddress, haIdentity, haLinkTls, localAdminAddress } from '../admin/peer-addresses.js';
export { TandemError } from '../broker/errors.js';

// Exit once stdout has drained into the shell agent's pipe.
export { exitWhenFlushed } from '../util/exit.js';

// What a number from another broker must be (a whole number), as the brokers read
// each other's positions: the agent ranks brokers by the ones HA-STATUS reports.
export { peerWholeNumber } from '../peer-link/peer-values.js';
