// The peer brokers a benchmark run measures tandem against, started side by side in
// the run's temp dir: a private RabbitMQ node and a private Artemis instance (either
// may be left out). Used by run.mjs and engine.mjs.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { createArtemisInstance, startArtemis } from './artemis.mjs';
import { log, startRabbit } from './lib.mjs';

/**
 * Starts the peers asked for and returns them (each with name, pid, port, loadArgs,
 * stop()); their versions go into `report.versions`, Artemis' journal settings into
 * `report.artemisJournal`. `artemisHome`: from ensureArtemis(), or undefined for none.
 */
export async function startPeers(base, report, { rabbit = true, artemisHome } = {}) {
  const peers = [];
  if (rabbit) {
    const dir = join(base, 'rabbitmq');
    mkdirSync(dir);
    const node = await startRabbit(dir);
    peers.push(node);
    report.versions.rabbitmq = node.version;
    log(`RabbitMQ ${node.version} beam pid ${node.pid} on port ${node.port}`);
  }
  if (artemisHome) {
    const inst = await createArtemisInstance(artemisHome, join(base, 'artemis'));
    const artemis = await startArtemis(inst, { name: 'artemis' });
    peers.push(artemis);
    report.versions.artemis = artemis.version;
    report.artemisJournal = inst.journal;
    log(`Artemis ${artemis.version} pid ${artemis.pid} on AMQP port ${artemis.port}; journal ${JSON.stringify(inst.journal)}`);
  }
  return peers;
}
