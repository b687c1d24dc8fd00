// A DR bridge of another site attaching here (DR_ADDRESS): it needs an admin identity,
// an HA cluster serves it from its primary only, and only a DR source (dr-retain-changes
// above 0) has a window to serve it from.
import type { ClientConnection } from '../amqp/client-connection.js';
import type { Link } from '../amqp/engine/link.js';
import type { SpecialSender } from '../amqp/server.js';
import type { HaManager } from '../ha/ha-manager.js';
import type { DrSource } from './source.js';
import { EnginePeerSender } from '../peer-link/engine-sender.js';

/** The link's handler, or false when it is refused (closed with the reason). */
export function openDrSourceLink(on: { ha: HaManager | undefined; source: DrSource | undefined }, conn: ClientConnection, sender: Link): SpecialSender | false {
  const link = new EnginePeerSender(sender);
  const refuse = (condition: string, description: string) => {
    // No source in the answering attach: the bridge must not take the link as open.
    link.refuse({ condition, description });
    return false as const;
  };
  if (!conn.admin) return refuse('amqp:unauthorized-access', 'a DR bridge needs an admin identity on the source (user[/password]@ in the DR source URL)');
  if (on.ha && !on.ha.isPrimary) return refuse('tandem:dr:not-primary', `this broker is an HA backup (${on.ha.state}), not the primary of its cluster`);
  const source = on.source;
  if (!source) return refuse('tandem:dr:disabled', 'this broker is not a DR source (dr-retain-changes = 0)');
  const stream = source.attach(link, conn.remoteAddress);
  if (!stream) return false;
  return {
    // What was sent before there was credit goes first (engine-sender.ts).
    onFlow: () => {
      link.flush();
      stream.pump();
    },
    onSettled: () => undefined,
    onClose: () => source.detach(stream),
  };
}
