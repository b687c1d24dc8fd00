// What validate-all says about the broker's HA settings against the cluster's
// own timing (docs/pacemaker.md, "Timing and the settlement quorum"). Safety
// does not depend on these times: a primary cut off from its backups settles
// nothing while ha-min-ready-backups are missing, however long the other side
// takes to fence and promote. The times decide how long publishers wait.
import { minReadyBackupsRisk, parseBrokersUrl, type Settings } from './broker-facts.js';

/** Corosync's membership timing as the running corosync uses it (corosync-cmapctl). */
export interface TotemTiming {
  tokenMs: number;
  consensusMs: number;
}

/** Warnings, each with its reason and what to change; empty when the settings fit. */
export function timingWarnings(settings: Settings, totem: TotemTiming | undefined): string[] {
  const out: string[] = [];
  const brokers = parseBrokersUrl(settings.haBrokersUrl ?? '').endpoints.length;
  const risk = minReadyBackupsRisk(settings.haMinReadyBackups, brokers);
  if (risk) out.push(risk);
  if (totem) {
    // A backup that hears nothing from its primary (power loss, partition) counts it
    // lost after two heartbeat intervals; Pacemaker promotes another one after token +
    // consensus (plus fencing). A new primary waits for the backups that were ready: if
    // they still wait for the old one, every such failover takes the longer of the two.
    const silence = 2 * settings.haHeartbeatIntervalMs;
    const membership = totem.tokenMs + totem.consensusMs;
    if (silence > membership) {
      out.push(
        `2 x ha-heartbeat-interval (${silence} ms) is longer than corosync's token + consensus (${totem.tokenMs} + ${totem.consensusMs} ms): after a power loss or a partition the new primary holds publishers until the other backups give up on the old one, ${silence - membership} ms after Pacemaker promoted it; set ha-heartbeat-interval to at most ${Math.floor(membership / 2)}ms`,
      );
    }
  }
  return out;
}
