// A backup's replication link arriving at this broker (REPLICATION_ADDRESS): only an
// admin identity may open one (the backups log in as ha-username, which must be an
// admin; docs/security.md), and the HA manager streams the log down it.
import type { ClientConnection } from '../amqp/client-connection.js';
import type { Link } from '../amqp/engine/link.js';
import type { SpecialSender } from '../amqp/server.js';
import type { HaManager } from './ha-manager.js';
import { EnginePeerSender } from '../peer-link/engine-sender.js';

/** The link's handler, or false when it is refused (closed with the reason). */
export function openReplicationLink(ha: HaManager, conn: ClientConnection, sender: Link): SpecialSender | false {
  const link = new EnginePeerSender(sender);
  if (!conn.admin) {
    link.refuse({ condition: 'amqp:unauthorized-access', description: 'replication needs an admin identity (the backups log in as ha-username)' });
    return false;
  }
  const stream = ha.openReplication(link, conn.remoteAddress);
  if (!stream) return false;
  return {
    // What was sent before there was credit goes first (engine-sender.ts).
    onFlow: () => {
      link.flush();
      stream.pump();
    },
    onSettled: (d, outcome) => {
      if (outcome !== 'settled') link.outcome(d, outcome === 'accepted');
    },
    onClose: () => ha.onReplicationGone(stream),
  };
}
