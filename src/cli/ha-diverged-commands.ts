// tandem ha diverged [list] | export NAME | republish NAME | drop NAME: the journals a backup
// set aside on rejoining a primary whose log lacked some of its changes
// (src/ha/diverged-store.ts). list asks the broker (or reads a data dir);
// export and republish read the set from the broker's data dir on this host.
import { rmSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import type { Command } from 'commander';
import { parseBrokerAddress, type BrokerAddress } from '../admin/client.js';
import { brokerAddressOf, timeoutMsOf } from './broker-address.js';
import { parseBrokersUrl } from '../ha/brokers-url.js';
import { republish } from '../admin/republish.js';
import { TandemError } from '../broker/errors.js';
import { exportLine, openDivergedSet } from '../ha/diverged-messages.js';
import { DIVERGED_DIR, listDiverged, readDiverged, recordRepublished, type DivergedSet } from '../ha/diverged-store.js';
import { loadSettings } from '../ops/config.js';
import { exitWhenFlushed } from '../util/exit.js';
import { haStatusOf, haTarget, type HaOptions } from './ha-commands.js';
import { hostPort } from '../util/host-port.js';

interface DivergedOptions extends HaOptions {
  dataDir?: string;
}

type Row = { name: string; epoch: number; from: number; through: number; 'set-aside-at': string; republished: number; path?: string };

export function haDivergedCommands(ha: Command, common: (cmd: Command) => Command, fail: (err: unknown) => Promise<never>): void {
  const diverged = ha.command('diverged').description('changes a backup kept aside on rejoining, because the primary lacked them: list, export, re-publish, drop');
  const withDataDir = (cmd: Command) => common(cmd).option('--data-dir <dir>', "the broker's data dir (default: data-dir of the config file)");

  withDataDir(diverged.command('list', { isDefault: true }).description('the diverged sets of a broker, with their LSN ranges')).action(async (o: DivergedOptions) => {
    try {
      const rows: Row[] = o.dataDir ? listDiverged(o.dataDir).map(toRow) : (((await haStatusOf(haTarget(o).address, ms(o))).diverged as Row[] | undefined) ?? []);
      if (o.json) process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
      else if (rows.length === 0) process.stdout.write('no diverged changes\n');
      else for (const r of rows) process.stdout.write(`${describe(r)}\n`);
      return exitWhenFlushed(0);
    } catch (err) {
      return fail(err);
    }
  });

  withDataDir(diverged.command('export').description('print the diverged messages as JSON lines (queue, LSN, properties, the exact bytes in base64)'))
    .argument('<name>', 'the set, as listed')
    .action(async (name: string, o: DivergedOptions) => {
      try {
        const set = await openDivergedSet(findSet(name, o));
        try {
          for (const m of set.messages()) {
            // Wait for the pipe now and then: a set may be larger than memory.
            if (!process.stdout.write(`${exportLine(m)}\n`)) await new Promise((r) => process.stdout.once('drain', r));
          }
        } finally {
          await set.close();
        }
        return exitWhenFlushed(0);
      } catch (err) {
        return fail(err);
      }
    });

  withDataDir(diverged.command('drop').description('delete a diverged set (the whole journal it keeps) once it is dealt with'))
    .argument('<name>', 'the set, as listed')
    .option('--force', 'also when not every message was re-published')
    .action(async (name: string, o: DivergedOptions & { force?: boolean }) => {
      try {
        const set = findSet(name, o);
        if (!o.force) {
          const open = await openDivergedSet(set);
          const count = open.count;
          await open.close();
          if (set.republished < count) {
            throw new TandemError('TANDEM_ERR_PRECONDITION', `${set.name} holds ${count} messages and ${set.republished} were re-published; re-publish them first, or drop it with --force`);
          }
        }
        dropSet(set);
        process.stdout.write(`dropped ${set.name}\n`);
        return exitWhenFlushed(0);
      } catch (err) {
        return fail(err);
      }
    });

  withDataDir(diverged.command('republish').description('publish the diverged messages again to the current primary, with their original message ids and properties, marked redelivered (delivery-count one higher)'))
    .argument('<name>', 'the set, as listed')
    .option('--to <address>', "[amqp[s]://][user[/password]@]host[:port] of the primary (default: the primary the broker follows)")
    .option('--include-uncertain', 'also the messages of a snapshot loaded after the divergence point, which the primary may hold already')
    .action(async (name: string, o: DivergedOptions & { to?: string; includeUncertain?: boolean }) => {
      try {
        const set = findSet(name, o);
        const to = await primaryAddress(o);
        const open = await openDivergedSet(set);
        try {
          let skipped = 0;
          let position = 0;
          const already = set.republished;
          // The first `already` chosen messages were accepted by an earlier run: skipped, not sent again.
          const rest = function* () {
            for (const m of open.messages()) {
              if (m.uncertain && !o.includeUncertain) {
                skipped++;
                continue;
              }
              if (position++ < already) continue;
              yield { queue: m.queue, message: m.record };
            }
          };
          const sent = await republish(to, rest(), (n) => recordRepublished(set, already + n), ms(o) * 6);
          const chosen = open.count - skipped;
          process.stdout.write(
            `${Math.min(already, chosen) + sent} of ${chosen} messages of ${set.name} re-published to ${hostPort(to.host, to.port)}${already > 0 ? ` (${Math.min(already, chosen)} already before)` : ''}` +
              `${skipped > 0 ? `; ${skipped} from a snapshot after the divergence point left out (--include-uncertain)` : ''}\n`,
          );
        } finally {
          await open.close();
        }
        return exitWhenFlushed(0);
      } catch (err) {
        return fail(err);
      }
    });
}

const ms = (o: HaOptions) => timeoutMsOf(o.timeout, 5);

/** Remove a set for good, once its messages were re-published or judged not needed. */
function dropSet(set: DivergedSet): void {
  rmSync(set.path, { recursive: true, force: true });
}

function toRow(d: DivergedSet): Row {
  return { name: d.name, epoch: d.epoch, from: d.after + 1, through: d.through, 'set-aside-at': d.setAsideAt, republished: d.republished, path: d.path };
}

export function describe(r: Row): string {
  return `${r.name}: epoch ${r.epoch}, LSN ${r.from} to ${r.through}, set aside ${r['set-aside-at']}${r.republished > 0 ? `, ${r.republished} messages re-published` : ''}`;
}

function dataDirOf(o: DivergedOptions): string {
  return o.dataDir ?? loadSettings({}, o.config ?? '/etc/tandem/tandemd.conf').dataDir;
}

function findSet(name: string, o: DivergedOptions): DivergedSet {
  if (!/^[\w.-]+$/.test(name) && !isAbsolute(name)) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `'${name}' is not a diverged set name (see tandem ha diverged list)`);
  const set = readDiverged(isAbsolute(name) ? name : join(dataDirOf(o), DIVERGED_DIR, name));
  if (!set) throw new TandemError('TANDEM_ERR_NOT_FOUND', `no diverged set '${name}' in ${join(dataDirOf(o), DIVERGED_DIR)} (see tandem ha diverged list --data-dir DIR)`);
  return set;
}

/** --to, else the primary the local broker follows (or the broker itself when it is the primary). */
async function primaryAddress(o: DivergedOptions & { to?: string }): Promise<BrokerAddress> {
  if (o.to) return brokerAddressOf(o.to, o);
  const target = haTarget(o);
  const status = await haStatusOf(target.address, ms(o));
  if (status.primary === 'self') return target.address;
  if (typeof status.primary !== 'string' || !status.primary) {
    throw new TandemError('TANDEM_ERR_PRECONDITION', `the broker (${status.state}) follows no primary now; give the primary with --to`);
  }
  const primary = parseBrokerAddress(status.primary);
  // The primary is reached as the brokers reach each other: TLS when their URL is amqps:.
  const tls = typeof status['brokers-url'] === 'string' && parseBrokersUrl(status['brokers-url']).tls;
  return { ...primary, user: target.address.user, password: target.address.password, ...(tls ? { tls: true, ...target.linkTls, external: target.address.external } : {}) };
}
